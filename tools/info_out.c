/* mpccl-info's output as indented text or JSON (info_out.h). */
#include "info_out.h"

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void indent(info_out_t *o, int depth)
{
    for (int i = 0; i < depth; i++) fputs("  ", o->f);
}

/* Starts an entry at the current depth: separators, indentation and the key.
 * container: an object or list follows (text: nothing after the colon). */
static void entry(info_out_t *o, const char *key, int container)
{
    int d = o->depth;
    if (o->json) {
        if (o->count[d]++) fputc(',', o->f);
        fputc('\n', o->f);
        indent(o, d + 1);
        if (key && !o->is_list[d]) {
            json_string(o->f, key);
            fputs(": ", o->f);
        }
        return;
    }
    if (o->inline_obj[d]) {
        fputs(o->count[d]++ ? ", " : "", o->f);
        if (key) fprintf(o->f, "%s=", key);
        return;
    }
    o->count[d]++;
    indent(o, d);
    if (o->is_list[d]) fputs("- ", o->f);
    if (key) fprintf(o->f, container ? "%s:" : "%s: ", key);
}

static void open_nested(info_out_t *o, const char *key, int list)
{
    int parent_list = o->is_list[o->depth], parent_inline = o->inline_obj[o->depth];
    entry(o, key, 1);
    if (o->depth + 1 >= INFO_OUT_MAX_DEPTH) return;
    int d = ++o->depth;
    o->count[d] = 0;
    o->is_list[d] = (char)list;
    o->inline_obj[d] = (char)(!o->json && (parent_inline || parent_list));
    if (o->json) fputc(list ? '[' : '{', o->f);
    else if (!o->inline_obj[d]) fputc('\n', o->f);
}

void info_out_begin(info_out_t *o, FILE *f, int json)
{
    o->f = f;
    o->json = json;
    o->depth = 0;
    o->count[0] = 0;
    o->is_list[0] = 0;
    o->inline_obj[0] = 0;
    if (json) fputc('{', f);
}

void info_out_end(info_out_t *o)
{
    while (o->depth > 0) info_out_close(o);
    if (o->json) fputs("\n}\n", o->f);
}

void info_out_object(info_out_t *o, const char *key)
{
    open_nested(o, key, 0);
}

void info_out_list(info_out_t *o, const char *key)
{
    open_nested(o, key, 1);
}

void info_out_close(info_out_t *o)
{
    int d = o->depth;
    if (d == 0) return;
    if (o->json) {
        if (o->count[d]) {
            fputc('\n', o->f);
            indent(o, d);
        }
        fputc(o->is_list[d] ? ']' : '}', o->f);
    } else if (o->inline_obj[d] && !o->inline_obj[d - 1]) {
        fputc('\n', o->f);
    } else if (!o->inline_obj[d] && o->count[d] == 0) {
        indent(o, d);
        fputs("(none)\n", o->f);
    }
    o->depth--;
}

void info_out_str(info_out_t *o, const char *key, const char *value)
{
    entry(o, key, 0);
    if (o->json) {
        if (value) json_string(o->f, value);
        else fputs("null", o->f);
    } else {
        fputs(!value ? "-" : *value ? value : "(unset)", o->f);
        if (!o->inline_obj[o->depth]) fputc('\n', o->f);
    }
}

void info_out_int(info_out_t *o, const char *key, long long value)
{
    entry(o, key, 0);
    fprintf(o->f, "%lld", value);
    if (!o->json && !o->inline_obj[o->depth]) fputc('\n', o->f);
}

void info_out_bool(info_out_t *o, const char *key, int value)
{
    entry(o, key, 0);
    fputs(o->json ? (value ? "true" : "false") : (value ? "yes" : "no"), o->f);
    if (!o->json && !o->inline_obj[o->depth]) fputc('\n', o->f);
}
