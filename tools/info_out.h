/* mpccl-info's output: nested objects and lists of keys and values, written as
 * indented text or as JSON (--json) from the same calls. */
#ifndef MPCCL_INFO_OUT_H
#define MPCCL_INFO_OUT_H

#include <stdio.h>

#define INFO_OUT_MAX_DEPTH 16

typedef struct {
    FILE *f;
    int json;
    int depth;
    int count[INFO_OUT_MAX_DEPTH];   /* entries written at each depth */
    char is_list[INFO_OUT_MAX_DEPTH]; /* depth d is a list (else an object) */
    char inline_obj[INFO_OUT_MAX_DEPTH]; /* text: an object in a list, on one line */
} info_out_t;

void info_out_begin(info_out_t *o, FILE *f, int json);
void info_out_end(info_out_t *o);
/* key is NULL for an element of a list. */
void info_out_object(info_out_t *o, const char *key);
void info_out_list(info_out_t *o, const char *key);
void info_out_close(info_out_t *o);
void info_out_str(info_out_t *o, const char *key, const char *value); /* NULL: null */
void info_out_int(info_out_t *o, const char *key, long long value);
void info_out_bool(info_out_t *o, const char *key, int value);

#endif
