/* A stranger attacking this process's own listeners (see stranger.h). */
#define _GNU_SOURCE
#include "stranger.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 64
#define HELD_PER_PORT 9
#define SCAN_MS 20

typedef struct {
    struct sockaddr_storage addr;
    socklen_t len;
    int held[HELD_PER_PORT];
} target_t;

struct stranger {
    pthread_t thread;
    unsigned long before[MAX_PORTS]; /* listeners that were there at the start: not attacked */
    int nbefore, noting;
    int flood, stop;
    target_t t[MAX_PORTS];
    int nt;
    long conns;
    unsigned char *got; /* every byte the listeners sent to held connections */
    size_t ngot, capgot;
};

#define MAX_INODES 4096

/* This process's socket inodes, read once per scan. */
static unsigned long inodes[MAX_INODES];
static int ninodes;

/* Reads them; returns their sum, which changes when sockets come and go. */
static unsigned long read_inodes(void)
{
    ninodes = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return 0;
    struct dirent *e;
    char path[300], link[64];
    unsigned long sum = 0;
    while ((e = readdir(d)) != NULL && ninodes < MAX_INODES) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0) continue;
        link[n] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1) {
            inodes[ninodes++] = ino;
            sum += ino * 0x9e3779b97f4a7c15ul;
        }
    }
    closedir(d);
    return sum;
}

static int own_socket(unsigned long inode)
{
    for (int i = 0; i < ninodes; i++)
        if (inodes[i] == inode) return 1;
    return 0;
}

static int known(const stranger_t *s, const struct sockaddr_storage *a, socklen_t len)
{
    for (int i = 0; i < s->nt; i++)
        if (s->t[i].len == len && !memcmp(&s->t[i].addr, a, len)) return 1;
    return 0;
}

static int connect_to(const target_t *t)
{
    int c = socket(t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0) return -1;
    if (connect(c, (const struct sockaddr *)&t->addr, t->len) != 0) {
        close(c);
        return -1;
    }
    return c;
}

static void attack(stranger_t *s, target_t *t)
{
    for (int k = 0; k < HELD_PER_PORT; k++) {
        t->held[k] = connect_to(t);
        if (t->held[k] < 0) continue;
        s->conns++;
        unsigned char buf[64];
        if (k >= 3 && k < 6) { /* garbage */
            for (size_t b = 0; b < sizeof(buf); b++) buf[b] = (unsigned char)rand();
            (void)send(t->held[k], buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
        } else if (k >= 6) { /* a huge length where headers keep theirs */
            memset(buf, 0xff, sizeof(buf));
            uint32_t huge = 0x7fffffffu;
            memcpy(buf + 4, &huge, 4);
            memcpy(buf + 8, &huge, 4);
            (void)send(t->held[k], buf, 16, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        fcntl(t->held[k], F_SETFL, O_NONBLOCK);
    }
}

static void scan(stranger_t *s, const char *file, int family)
{
    FILE *f = fopen(file, "r");
    if (f == NULL) return;
    char line[512];
    if (fgets(line, sizeof(line), f) == NULL) { /* the header */
        fclose(f);
        return;
    }
    while (fgets(line, sizeof(line), f) && s->nt < MAX_PORTS) {
        char local[64], remote[64];
        unsigned st, uid;
        unsigned long inode, dummy;
        if (sscanf(line, " %*d: %63s %63s %x %*s %*s %*s %u %lu %lu", local, remote, &st, &uid, &dummy, &inode) != 6)
            continue;
        if (st != 0x0A) continue; /* LISTEN */
        char *colon = strchr(local, ':');
        if (colon == NULL) continue;
        unsigned port = (unsigned)strtoul(colon + 1, NULL, 16);
        struct sockaddr_storage a;
        socklen_t len;
        memset(&a, 0, sizeof(a));
        if (family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&a;
            in->sin_family = AF_INET;
            in->sin_port = htons((uint16_t)port);
            in->sin_addr.s_addr = (in_addr_t)strtoul(local, NULL, 16); /* the kernel prints it in host order */
            if (in->sin_addr.s_addr == 0) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)port);
            for (int w = 0; w < 4; w++) {
                char word[9];
                memcpy(word, local + 8 * w, 8);
                word[8] = '\0';
                uint32_t v = (uint32_t)strtoul(word, NULL, 16);
                memcpy(&in6->sin6_addr.s6_addr[4 * w], &v, 4);
            }
            if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) in6->sin6_addr = in6addr_loopback;
            len = sizeof(*in6);
        }
        if (known(s, &a, len) || !own_socket(inode)) continue;
        int old = 0;
        for (int b = 0; b < s->nbefore; b++) old |= s->before[b] == inode;
        if (s->noting) {
            if (!old && s->nbefore < MAX_PORTS) s->before[s->nbefore++] = inode;
            continue;
        }
        if (old) continue;
        target_t *t = &s->t[s->nt++];
        memcpy(&t->addr, &a, len);
        t->len = len;
        attack(s, t);
    }
    fclose(f);
}

/* Keeps what the listeners sent (challenges, refusals) and closes held
 * connections the listener closed, opening new ones in their place. */
static void drain(stranger_t *s)
{
    for (int i = 0; i < s->nt; i++)
        for (int k = 0; k < HELD_PER_PORT; k++) {
            if (s->t[i].held[k] < 0) continue;
            unsigned char buf[512];
            ssize_t n = recv(s->t[i].held[k], buf, sizeof(buf), MSG_DONTWAIT);
            if (n > 0) {
                if (s->ngot + (size_t)n > s->capgot) {
                    size_t cap = 2 * (s->ngot + (size_t)n);
                    unsigned char *g = realloc(s->got, cap);
                    if (g == NULL) continue;
                    s->got = g;
                    s->capgot = cap;
                }
                memcpy(s->got + s->ngot, buf, (size_t)n);
                s->ngot += (size_t)n;
            }
        }
}

static void *run(void *arg)
{
    stranger_t *s = arg;
    unsigned long last = 0;
    for (long round = 0; !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE); round++) {
        /* The system's socket tables are long: read them only when this
         * process's own sockets changed (the stranger's included). */
        unsigned long now = read_inodes();
        if (now != last) {
            scan(s, "/proc/self/net/tcp", AF_INET);
            scan(s, "/proc/self/net/tcp6", AF_INET6);
            last = read_inodes();
        }
        if (round % 5 == 0)
            for (int i = 0; i < s->nt; i++)
                for (int k = 0; k < s->flood; k++) {
                    int c = connect_to(&s->t[i]);
                    if (c >= 0) {
                        s->conns++;
                        close(c);
                    }
                }
        drain(s);
        struct timespec nap = {0, SCAN_MS * 1000000L};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

stranger_t *stranger_start(int flood)
{
    stranger_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->flood = flood;
    /* The listeners already open (the MPI library's own, whose TCP
     * transport hangs a job on a silent connection) are left alone: the
     * stranger attacks what opens from now on. */
    s->noting = 1;
    read_inodes();
    scan(s, "/proc/self/net/tcp", AF_INET);
    scan(s, "/proc/self/net/tcp6", AF_INET6);
    s->noting = 0;
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

int stranger_stop(stranger_t *s, long *conns, int (*leaked)(const unsigned char *buf, size_t n, void *arg), void *arg,
                  int *leak)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    pthread_join(s->thread, NULL);
    drain(s);
    *leak = leaked ? leaked(s->got, s->ngot, arg) : 0;
    for (int i = 0; i < s->nt; i++)
        for (int k = 0; k < HELD_PER_PORT; k++)
            if (s->t[i].held[k] >= 0) close(s->t[i].held[k]);
    int n = s->nt;
    *conns = s->conns;
    free(s->got);
    free(s);
    return n;
}
