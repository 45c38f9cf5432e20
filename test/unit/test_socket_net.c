/* The socket helpers of lib/bootstrap/bootstrap_net.c that need no peer:
 * interface naming and choice rules, address parsing, and listeners kept off
 * ports they are told to avoid. */
#define _GNU_SOURCE
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap_net.h"
#include "util/status.h"

START_TEST(ifname_match_rules)
{
    ck_assert(mpccl_socket_ifname_match("eth", "eth0"));
    ck_assert(!mpccl_socket_ifname_match("eth", "ib0"));
    ck_assert(mpccl_socket_ifname_match("ib,eth", "eth2"));
    ck_assert(mpccl_socket_ifname_match(" eth , ib ", "ib1"));
    ck_assert(!mpccl_socket_ifname_match("^docker", "docker0"));
    ck_assert(mpccl_socket_ifname_match("^docker", "eth0"));
    ck_assert(!mpccl_socket_ifname_match("^docker,lo", "lo"));
    ck_assert(mpccl_socket_ifname_match("=eth0", "eth0"));
    ck_assert(!mpccl_socket_ifname_match("=eth0", "eth01"));
    ck_assert(!mpccl_socket_ifname_match("=eth0,ib0", "ib"));
    ck_assert(mpccl_socket_ifname_match("=eth0,ib0", "ib0"));
    ck_assert(mpccl_socket_ifname_match("^=eth0", "eth01"));
    ck_assert(!mpccl_socket_ifname_match("^=eth0", "eth0"));
    ck_assert(mpccl_socket_ifname_match("^", "anything"));
    ck_assert(!mpccl_socket_ifname_match("eth,", "ib0")); /* empty token matches nothing */
}
END_TEST

static mpccl_ifcand_t cand(const char *name, int loopback)
{
    mpccl_ifcand_t c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "%s", name);
    c.loopback = loopback;
    c.addr.sa.sa_family = AF_INET;
    return c;
}

START_TEST(interface_pick_rules)
{
    mpccl_ifcand_t c[] = {cand("lo", 1), cand("docker0", 0), cand("virbr0", 0),
                          cand("eth0", 0), cand("eth1", 0), cand("ib0", 0)};
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, NULL), 5);   /* ib first */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 5, NULL), 3);   /* then eth0 */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 3, NULL), 1);   /* then docker */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 1, NULL), 0);   /* then lo */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 0, NULL), -1);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, ""), 5);     /* empty = unset */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "eth"), 3);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "=eth1"), 4);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "lo"), 0);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "bond"), -1);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "^ib"), 3);  /* not lo */
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "^ib,eth"), 1);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "^=eth0,ib0"), 4);
    ck_assert_int_eq(mpccl_socket_pick_interface(c, 6, "^ib,eth,docker,virbr,lo"), -1);
}
END_TEST

START_TEST(sockaddr_parse_rules)
{
    mpccl_sockaddr_t a;
    char s[MPCCL_SOCKADDR_STRLEN];
    ck_assert_int_eq(mpccl_sockaddr_parse("127.0.0.1:1234", &a), MPCCL_OK);
    ck_assert_str_eq(mpccl_sockaddr_str(&a, s), "127.0.0.1:1234");
    ck_assert_int_eq(mpccl_sockaddr_parse("[::1]:80", &a), MPCCL_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET6);
    ck_assert_str_eq(mpccl_sockaddr_str(&a, s), "[::1]:80");
    ck_assert_int_eq(mpccl_sockaddr_len(&a), sizeof(struct sockaddr_in6));
    ck_assert_int_eq(mpccl_sockaddr_parse("localhost:5", &a), MPCCL_OK);
    const char *bad[] = {"", "1.2.3.4", "::1:80", "[::1]", "[::1]80", "h:0", "1.2.3.4:70000",
                         "1.2.3.4:12x", ":80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(mpccl_sockaddr_parse(bad[i], &a) == MPCCL_ERR_ARG, "'%s' accepted", bad[i]);
}
END_TEST

/* Listeners of a thread keep off the ports it is told to avoid (a shrink: its
 * parent's doors).  Ports just freed are what the kernel may hand out next;
 * without the avoidance some of 300 binds land on 40 of them about every
 * other run, with it none may. */
START_TEST(socket_listen_avoids_ports)
{
    mpccl_sockaddr_t any, bound;
    char ifname[32];
    ck_assert_int_eq(mpccl_socket_find_interface(&any, ifname, sizeof(ifname)), MPCCL_OK);
    enum { NFREED = 40, NBINDS = 300 };
    uint16_t freed[NFREED];
    int fds[NFREED];
    for (int i = 0; i < NFREED; i++) {
        ck_assert_int_eq(mpccl_socket_listen(&any, &fds[i], &bound), MPCCL_OK);
        freed[i] = mpccl_sockaddr_port(&bound);
    }
    for (int i = 0; i < NFREED; i++) close(fds[i]);
    mpccl_socket_avoid_ports(freed, NFREED);
    for (int b = 0; b < NBINDS; b++) {
        int fd;
        ck_assert_int_eq(mpccl_socket_listen(&any, &fd, &bound), MPCCL_OK);
        for (int i = 0; i < NFREED; i++)
            ck_assert_msg(mpccl_sockaddr_port(&bound) != freed[i], "bind %d took avoided port %u", b, freed[i]);
        close(fd);
    }
    mpccl_socket_avoid_ports(NULL, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("socket_net");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, ifname_match_rules);
    tcase_add_test(tc, interface_pick_rules);
    tcase_add_test(tc, sockaddr_parse_rules);
    suite_add_tcase(s, tc);
    tc = tcase_create("listen");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, socket_listen_avoids_ports);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
