/* clients_libmemcached.c — a real client against one memcached server.
 *
 * libmemcached (Debian's libmemcached-dev) against the server on
 * 127.0.0.1:PORT, once over the text protocol and once over the binary one
 * (MEMCACHED_BEHAVIOR_BINARY_PROTOCOL): set, add, replace, append, prepend,
 * get, multi-get (memcached_mget + memcached_fetch_result), gets + cas,
 * incr, decr, delete, touch, exist, a 512 KiB value, stats, version and
 * flush, each result checked (return code and data). Then a CAS race:
 * THREADS kernel threads, each with its own clone of the client, increment
 * one key ROUNDS times by gets + cas, retrying on DATA_EXISTS; the final
 * value must be exactly THREADS * ROUNDS.
 *
 * The server is started and stopped by the caller (mc_with_server.py).
 * Usage: clients_libmemcached PORT [THREADS [ROUNDS]]. Exit 0: all checks
 * passed; 1: a check failed (each failure is printed). */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

static int failures;
static const char *proto = "text";

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL [%s]: ", proto);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

/* The return code of an operation must be `want`. */
static void rc_is(memcached_st *m, const char *what, memcached_return_t rc, memcached_return_t want) {
    if (rc != want)
        fail("%s: %s (%s), expected %s", what, memcached_strerror(m, rc), memcached_last_error_message(m),
             memcached_strerror(m, want));
}

/* key holds exactly `want` (NULL: key is absent) with flags `flags`. */
static void value_is(memcached_st *m, const char *key, const char *want, uint32_t flags) {
    size_t len = 0;
    uint32_t f = 0;
    memcached_return_t rc;
    char *v = memcached_get(m, key, strlen(key), &len, &f, &rc);
    if (want == NULL) {
        if (rc != MEMCACHED_NOTFOUND || v != NULL)
            fail("get %s: %s, value %.*s; expected a miss", key, memcached_strerror(m, rc), (int)(v ? len : 0),
                 v ? v : "");
    } else if (rc != MEMCACHED_SUCCESS || v == NULL) {
        fail("get %s: %s (%s), expected \"%s\"", key, memcached_strerror(m, rc), memcached_last_error_message(m),
             want);
    } else if (len != strlen(want) || memcmp(v, want, len) != 0 || f != flags) {
        fail("get %s: \"%.*s\" flags %" PRIu32 ", expected \"%s\" flags %" PRIu32, key, (int)len, v, f, want, flags);
    }
    free(v);
}

static memcached_return_t set(memcached_st *m, const char *key, const char *v, uint32_t flags) {
    return memcached_set(m, key, strlen(key), v, strlen(v), 0, flags);
}

static memcached_st *client(int port, int binary) {
    memcached_st *m = memcached_create(NULL);
    if (m == NULL) {
        fprintf(stderr, "memcached_create failed\n");
        exit(1);
    }
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, (uint64_t)binary);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 5000);   /* ms */
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 10000);     /* ms */
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SND_TIMEOUT, 10000000);   /* us */
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, 10000000);   /* us */
    memcached_return_t rc = memcached_server_add(m, "127.0.0.1", (in_port_t)port);
    if (rc != MEMCACHED_SUCCESS) {
        fprintf(stderr, "memcached_server_add: %s\n", memcached_strerror(m, rc));
        exit(1);
    }
    return m;
}

/* ---- every command ---------------------------------------------------------------------- */

static void storage_commands(memcached_st *m, int binary) {
    rc_is(m, "flush", memcached_flush(m, 0), MEMCACHED_SUCCESS);
    rc_is(m, "set k1", set(m, "k1", "v1", 7), MEMCACHED_SUCCESS);
    value_is(m, "k1", "v1", 7);
    rc_is(m, "set k1 again", set(m, "k1", "v1b", 8), MEMCACHED_SUCCESS);
    value_is(m, "k1", "v1b", 8);
    /* The binary protocol says why: the key exists, or is absent. */
    rc_is(m, "add k1 (exists)", memcached_add(m, "k1", 2, "x", 1, 0, 0),
          binary ? MEMCACHED_DATA_EXISTS : MEMCACHED_NOTSTORED);
    value_is(m, "k1", "v1b", 8);
    rc_is(m, "add k2", memcached_add(m, "k2", 2, "v2", 2, 0, 2), MEMCACHED_SUCCESS);
    value_is(m, "k2", "v2", 2);
    rc_is(m, "replace k3 (absent)", memcached_replace(m, "k3", 2, "x", 1, 0, 0),
          binary ? MEMCACHED_NOTFOUND : MEMCACHED_NOTSTORED);
    value_is(m, "k3", NULL, 0);
    rc_is(m, "replace k2", memcached_replace(m, "k2", 2, "v2r", 3, 0, 3), MEMCACHED_SUCCESS);
    value_is(m, "k2", "v2r", 3);
    rc_is(m, "append k1", memcached_append(m, "k1", 2, "-a", 2, 0, 0), MEMCACHED_SUCCESS);
    rc_is(m, "prepend k1", memcached_prepend(m, "k1", 2, "p-", 2, 0, 0), MEMCACHED_SUCCESS);
    value_is(m, "k1", "p-v1b-a", 8); /* append/prepend keep the flags */
    rc_is(m, "append k3 (absent)", memcached_append(m, "k3", 2, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    rc_is(m, "prepend k3 (absent)", memcached_prepend(m, "k3", 2, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    value_is(m, "k3", NULL, 0);
    rc_is(m, "exist k1", memcached_exist(m, "k1", 2), MEMCACHED_SUCCESS);
    rc_is(m, "exist k3", memcached_exist(m, "k3", 2), MEMCACHED_NOTFOUND);
    rc_is(m, "delete k2", memcached_delete(m, "k2", 2, 0), MEMCACHED_SUCCESS);
    rc_is(m, "delete k2 again", memcached_delete(m, "k2", 2, 0), MEMCACHED_NOTFOUND);
    value_is(m, "k2", NULL, 0);
    rc_is(m, "touch k1", memcached_touch(m, "k1", 2, 3600), MEMCACHED_SUCCESS);
    value_is(m, "k1", "p-v1b-a", 8);
    rc_is(m, "touch k3 (absent)", memcached_touch(m, "k3", 2, 3600), MEMCACHED_NOTFOUND);
    if (!binary) { /* a negative expiry: expired at once (binary's is unsigned) */
        rc_is(m, "set expired", memcached_set(m, "kx", 2, "x", 1, (time_t)-1, 0), MEMCACHED_SUCCESS);
        value_is(m, "kx", NULL, 0);
    }

    /* A value of 512 KiB, every byte checked. */
    size_t big_len = 512 * 1024;
    char *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++) big[i] = (char)('a' + (i * 7 + i / 251) % 26);
    rc_is(m, "set big", memcached_set(m, "big", 3, big, big_len, 0, 5), MEMCACHED_SUCCESS);
    size_t len = 0;
    uint32_t f = 0;
    memcached_return_t rc;
    char *v = memcached_get(m, "big", 3, &len, &f, &rc);
    if (rc != MEMCACHED_SUCCESS || v == NULL || len != big_len || memcmp(v, big, big_len) != 0 || f != 5)
        fail("get big: %s, %zu bytes, flags %" PRIu32 " (%s)", memcached_strerror(m, rc), len, f,
             v && len == big_len ? "content differs" : "length differs");
    free(v);
    free(big);
}

/* The end of a fetch loop: libmemcached 1.1 says NOTFOUND (1.0 said END). */
static int fetch_end(memcached_return_t rc) { return rc == MEMCACHED_END || rc == MEMCACHED_NOTFOUND; }

static void multi_get(memcached_st *m) {
    enum { N = 40 };
    char keys[N][16];
    const char *kp[N];
    size_t kl[N];
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "mk%d", i);
        kp[i] = keys[i];
        kl[i] = strlen(keys[i]);
        if (i % 2 == 0) { /* only the even ones exist */
            char val[32];
            snprintf(val, sizeof val, "value-%d", i * 31);
            rc_is(m, "set mk", memcached_set(m, keys[i], kl[i], val, strlen(val), 0, (uint32_t)i), MEMCACHED_SUCCESS);
        }
    }
    rc_is(m, "mget", memcached_mget(m, kp, kl, N), MEMCACHED_SUCCESS);
    memcached_return_t rc;
    memcached_result_st *r;
    int got = 0;
    while ((r = memcached_fetch_result(m, NULL, &rc)) != NULL) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)memcached_result_key_length(r), memcached_result_key_value(r));
        int i = -1;
        if (sscanf(key, "mk%d", &i) != 1 || i < 0 || i >= N || i % 2 != 0) {
            fail("mget returned key %s, which was not stored", key);
        } else {
            char want[32];
            snprintf(want, sizeof want, "value-%d", i * 31);
            if (memcached_result_length(r) != strlen(want) ||
                memcmp(memcached_result_value(r), want, strlen(want)) != 0 || memcached_result_flags(r) != (uint32_t)i)
                fail("mget %s: \"%.*s\" flags %" PRIu32 ", expected \"%s\" flags %d", key,
                     (int)memcached_result_length(r), memcached_result_value(r), memcached_result_flags(r), want, i);
            if (seen[i]++) fail("mget returned %s twice", key);
        }
        got++;
        memcached_result_free(r);
    }
    if (!fetch_end(rc)) fail("mget ended with %s, expected END", memcached_strerror(m, rc));
    if (got != N / 2) fail("mget returned %d values, %d keys of %d exist", got, N / 2, N);
}

/* gets: the CAS unique of key through mget + fetch (0 when absent). */
static uint64_t gets(memcached_st *m, const char *key, char *val, size_t cap) {
    const char *kp[1] = {key};
    size_t kl[1] = {strlen(key)};
    memcached_return_t rc = memcached_mget(m, kp, kl, 1);
    if (rc != MEMCACHED_SUCCESS) {
        fail("gets %s: mget %s (%s)", key, memcached_strerror(m, rc), memcached_last_error_message(m));
        return 0;
    }
    uint64_t cas = 0;
    memcached_result_st *r;
    while ((r = memcached_fetch_result(m, NULL, &rc)) != NULL) {
        cas = memcached_result_cas(r);
        if (val) snprintf(val, cap, "%.*s", (int)memcached_result_length(r), memcached_result_value(r));
        memcached_result_free(r);
    }
    if (!fetch_end(rc)) fail("gets %s ended with %s", key, memcached_strerror(m, rc));
    return cas;
}

static void cas_commands(memcached_st *m) {
    rc_is(m, "set c1", set(m, "c1", "one", 1), MEMCACHED_SUCCESS);
    char val[64] = "";
    uint64_t cas = gets(m, "c1", val, sizeof val);
    if (cas == 0 || strcmp(val, "one") != 0) fail("gets c1: cas %" PRIu64 " value \"%s\"", cas, val);
    rc_is(m, "cas c1 (current)", memcached_cas(m, "c1", 2, "two", 3, 0, 1, cas), MEMCACHED_SUCCESS);
    value_is(m, "c1", "two", 1);
    rc_is(m, "cas c1 (stale)", memcached_cas(m, "c1", 2, "three", 5, 0, 1, cas), MEMCACHED_DATA_EXISTS);
    value_is(m, "c1", "two", 1);
    uint64_t cas2 = gets(m, "c1", val, sizeof val);
    if (cas2 == 0 || cas2 == cas) fail("gets c1 after cas: unique %" PRIu64 " (was %" PRIu64 ")", cas2, cas);
    rc_is(m, "cas c9 (absent)", memcached_cas(m, "c9", 2, "x", 1, 0, 0, cas2), MEMCACHED_NOTFOUND);
    value_is(m, "c9", NULL, 0);
}

static void arithmetic(memcached_st *m, int binary) {
    uint64_t v = 0;
    rc_is(m, "set n", set(m, "n", "10", 0), MEMCACHED_SUCCESS);
    rc_is(m, "incr n 5", memcached_increment(m, "n", 1, 5, &v), MEMCACHED_SUCCESS);
    if (v != 15) fail("incr n 5: %" PRIu64 ", expected 15", v);
    rc_is(m, "decr n 3", memcached_decrement(m, "n", 1, 3, &v), MEMCACHED_SUCCESS);
    if (v != 12) fail("decr n 3: %" PRIu64 ", expected 12", v);
    rc_is(m, "decr n 100", memcached_decrement(m, "n", 1, 100, &v), MEMCACHED_SUCCESS);
    if (v != 0) fail("decr n 100: %" PRIu64 ", expected 0 (decr stops at 0)", v);
    rc_is(m, "set big n", set(m, "n", "18446744073709551615", 0), MEMCACHED_SUCCESS);
    rc_is(m, "incr n 2 (wraps)", memcached_increment(m, "n", 1, 2, &v), MEMCACHED_SUCCESS);
    if (v != 1) fail("incr 2^64-1 by 2: %" PRIu64 ", expected 1 (64-bit wrap)", v);
    /* incr rewrites the value in place, padding with spaces to its length. */
    value_is(m, "n", "1                   ", 0);
    rc_is(m, "incr absent", memcached_increment(m, "nx", 2, 1, &v), MEMCACHED_NOTFOUND);
    rc_is(m, "decr absent", memcached_decrement(m, "nx", 2, 1, &v), MEMCACHED_NOTFOUND);
    rc_is(m, "set text", set(m, "nt", "abc", 0), MEMCACHED_SUCCESS);
    memcached_return_t rc = memcached_increment(m, "nt", 2, 1, &v);
    if (rc == MEMCACHED_SUCCESS) fail("incr of \"abc\" succeeded (%" PRIu64 ")", v);
    value_is(m, "nt", "abc", 0);
    if (binary) { /* only the binary protocol has an initial value */
        rc_is(m, "incr with initial (absent)", memcached_increment_with_initial(m, "ni", 2, 1, 42, 0, &v),
              MEMCACHED_SUCCESS);
        if (v != 42) fail("incr with initial 42 of an absent key: %" PRIu64, v);
        rc_is(m, "incr with initial (present)", memcached_increment_with_initial(m, "ni", 2, 1, 42, 0, &v),
              MEMCACHED_SUCCESS);
        if (v != 43) fail("incr with initial of 42: %" PRIu64 ", expected 43", v);
    }
}

static void stats_version_flush(memcached_st *m) {
    memcached_return_t rc;
    memcached_stat_st *st = memcached_stat(m, NULL, &rc);
    rc_is(m, "stats", rc, MEMCACHED_SUCCESS);
    if (st) {
        const char *names[] = {"pid", "curr_items", "total_items", "curr_connections", "cmd_get", "get_hits",
                               "version", "threads"};
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            char *v = memcached_stat_get_value(m, st, names[i], &rc);
            if (rc != MEMCACHED_SUCCESS || v == NULL || !*v) fail("stat %s: %s", names[i], memcached_strerror(m, rc));
            free(v);
        }
        if (st->pid == 0 || st->curr_items == 0 || st->get_hits == 0 || st->threads != 2)
            fail("stats: pid %lu, curr_items %lu, get_hits %" PRIu64 ", threads %lu (started with -t 2)",
                 (unsigned long)st->pid, (unsigned long)st->curr_items, (uint64_t)st->get_hits,
                 (unsigned long)st->threads);
        if (strcmp(st->version, "1.6.18") != 0) fail("stats: version \"%s\", expected 1.6.18", st->version);
        memcached_stat_free(m, st);
    }
    rc_is(m, "version", memcached_version(m), MEMCACHED_SUCCESS);
    const memcached_instance_st *in = memcached_server_instance_by_position(m, 0);
    if (memcached_server_major_version(in) != 1 || memcached_server_minor_version(in) != 6 ||
        memcached_server_micro_version(in) != 18)
        fail("version: %u.%u.%u, expected 1.6.18", memcached_server_major_version(in),
             memcached_server_minor_version(in), memcached_server_micro_version(in));
    rc_is(m, "flush", memcached_flush(m, 0), MEMCACHED_SUCCESS);
    value_is(m, "k1", NULL, 0);
    value_is(m, "c1", NULL, 0);
    rc_is(m, "set after flush", set(m, "k1", "again", 0), MEMCACHED_SUCCESS);
    value_is(m, "k1", "again", 0);
}

/* ---- the CAS race ------------------------------------------------------------------------ */

struct racer {
    memcached_st *m;
    int rounds;
    long conflicts;
    int errors;
    pthread_t t;
};

static void *race(void *arg) {
    struct racer *r = arg;
    const char *kp[1] = {"race"};
    size_t kl[1] = {4};
    for (int done = 0; done < r->rounds;) {
        memcached_return_t rc = memcached_mget(r->m, kp, kl, 1);
        memcached_result_st *res;
        uint64_t cas = 0, value = 0;
        int found = 0;
        while ((res = memcached_fetch_result(r->m, NULL, &rc)) != NULL) {
            char buf[32];
            snprintf(buf, sizeof buf, "%.*s", (int)memcached_result_length(res), memcached_result_value(res));
            value = strtoull(buf, NULL, 10);
            cas = memcached_result_cas(res);
            found = 1;
            memcached_result_free(res);
        }
        if (!found || cas == 0) {
            if (++r->errors < 5) fprintf(stderr, "race: gets race: %s\n", memcached_strerror(r->m, rc));
            if (r->errors > 100) return NULL;
            continue;
        }
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%" PRIu64, value + 1);
        rc = memcached_cas(r->m, "race", 4, buf, (size_t)n, 0, 0, cas);
        if (rc == MEMCACHED_SUCCESS) {
            done++;
        } else if (rc == MEMCACHED_DATA_EXISTS) {
            r->conflicts++;
        } else {
            if (++r->errors < 5) fprintf(stderr, "race: cas: %s\n", memcached_strerror(r->m, rc));
            if (r->errors > 100) return NULL;
        }
    }
    return NULL;
}

static void cas_race(memcached_st *m, int threads, int rounds) {
    rc_is(m, "set race", set(m, "race", "0", 0), MEMCACHED_SUCCESS);
    struct racer *rs = calloc((size_t)threads, sizeof *rs);
    for (int i = 0; i < threads; i++) {
        rs[i].m = memcached_clone(NULL, m);
        rs[i].rounds = rounds;
    }
    for (int i = 0; i < threads; i++) pthread_create(&rs[i].t, NULL, race, &rs[i]);
    long conflicts = 0;
    int errors = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(rs[i].t, NULL);
        conflicts += rs[i].conflicts;
        errors += rs[i].errors;
        memcached_free(rs[i].m);
    }
    free(rs);
    char val[32] = "";
    gets(m, "race", val, sizeof val);
    long want = (long)threads * rounds;
    printf("  [%s] CAS race: %d threads x %d increments, %ld conflicts retried, final value %s\n", proto, threads,
           rounds, conflicts, val);
    if (errors) fail("CAS race: %d errors", errors);
    if (strtol(val, NULL, 10) != want) fail("CAS race: final value %s, expected %ld", val, want);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [THREADS [ROUNDS]]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 8;
    int rounds = argc > 3 ? atoi(argv[3]) : 200;
    for (int binary = 0; binary <= 1; binary++) {
        proto = binary ? "binary" : "text";
        int before = failures;
        memcached_st *m = client(port, binary);
        storage_commands(m, binary);
        multi_get(m);
        cas_commands(m);
        arithmetic(m, binary);
        stats_version_flush(m);
        cas_race(m, threads, rounds);
        memcached_free(m);
        printf("  [%s] %s\n", proto, failures == before ? "all commands as expected" : "FAILED");
    }
    printf("clients_libmemcached: %d failures\n", failures);
    return failures ? 1 : 0;
}
