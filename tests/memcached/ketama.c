/* ketama.c — the client side of the scale-out test (ketama.py drives it).
 *
 * One libmemcached client over three servers with ketama consistent hashing
 * (MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA, MD5 for the continuum and the
 * keys, as libketama), kept alive while ketama.py stops one server and
 * starts it again on the same port. The phases, each started by a line on
 * stdin and answered by a line on stdout ("ok ..." or "fail ..."):
 *
 *   fill      store KEYS keys; print how many each server owns
 *             (memcached_server_by_key), every key must then hit;
 *   down I    server I was killed: every key of server I fails (an error,
 *             never a value), every other key hits with its value, and sets
 *             of the other servers' keys succeed: the errors stay confined
 *             to the dead server's share;
 *   up I      server I runs again, empty, on its port: once libmemcached
 *             retries it (MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 1 s, 8 s with
 *             eject; bounded wait), its keys miss (NOTFOUND) and the others hit; its keys
 *             are stored again and then every key hits;
 *   quit.
 *
 * libmemcached's documented behaviour without
 * MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS: a server that fails is not
 * taken out of the continuum, so its keys are not moved to the others
 * (their servers' keys stay where they are); requests for its keys fail
 * until it answers again, retried after the retry timeout.
 *
 * With "eject" (MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, failure limit 1):
 * the server that fails is taken out of the continuum after its first
 * failure, so in "down" only its share moves (to the two others: those keys
 * miss, and can be set; every other key stays on its server and hits; at
 * most a few requests fail, the ones that find it dead: EJECT_ERRORS), and
 * once the retry timeout has passed it is put back, so "up" is as above.
 *
 * Usage: ketama PORT0 PORT1 PORT2 [KEYS [eject]]. Exit 0 when every phase
 * passed. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libmemcached/memcached.h>

static memcached_st *m;
static int ports[3];
static int nkeys = 3000;
static int *owner;       /* owner[i]: the server index key i maps to */
static int generation[3]; /* bumped when a server's keys are stored again */
static int failed;
static int eject; /* MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS */
#define FAILURE_LIMIT 1
/* Requests that may fail before the server is ejected: libmemcached 1.1.4
 * with a failure limit of 1 fails 3 (the broken connection, then the
 * refused reconnections that count towards the limit); a few more allowed. */
#define EJECT_ERRORS 5
#define EJECT_RETRY_S 8 /* s: libmemcached retries an ejected server (1 s without eject) */

static void key_of(int i, char *buf, size_t cap) { snprintf(buf, cap, "ketama:key:%d", i); }

static void value_of(int i, char *buf, size_t cap) {
    snprintf(buf, cap, "value-%d-of-%d-gen%d", i, nkeys, generation[owner[i]]);
}

static void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static int server_index(const char *key) {
    memcached_return_t rc;
    const memcached_instance_st *in = memcached_server_by_key(m, key, strlen(key), &rc);
    if (in == NULL) return -1;
    in_port_t p = memcached_server_port(in);
    for (int s = 0; s < 3; s++)
        if (ports[s] == p) return s;
    return -1;
}

/* 1: hit with the right value, 0: NOTFOUND, -1: an error (rc in *rcp). */
static int get_key(int i, memcached_return_t *rcp) {
    char key[64], want[96];
    key_of(i, key, sizeof key);
    value_of(i, want, sizeof want);
    size_t len = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    char *v = memcached_get(m, key, strlen(key), &len, &flags, &rc);
    *rcp = rc;
    int r;
    if (rc == MEMCACHED_SUCCESS && v != NULL) {
        r = (len == strlen(want) && memcmp(v, want, len) == 0) ? 1 : -2;
        if (r == -2) fprintf(stderr, "ketama: %s holds \"%.*s\", expected \"%s\"\n", key, (int)len, v, want);
    } else if (rc == MEMCACHED_NOTFOUND) {
        r = 0;
    } else {
        r = -1;
    }
    free(v);
    return r;
}

static memcached_return_t set_key(int i) {
    char key[64], val[96];
    key_of(i, key, sizeof key);
    value_of(i, val, sizeof val);
    return memcached_set(m, key, strlen(key), val, strlen(val), 0, 0);
}

/* Gets every key in a shuffled order (the dead server's keys interleaved
 * with the others'). counts[s][0..3]: hits, misses, errors, wrong values. */
static void get_all(int counts[3][4], memcached_return_t *an_error) {
    memset(counts, 0, sizeof(int) * 12);
    int *order = malloc(sizeof(int) * (size_t)nkeys);
    for (int i = 0; i < nkeys; i++) order[i] = i;
    for (int i = nkeys - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < nkeys; k++) {
        int i = order[k];
        memcached_return_t rc;
        int r = get_key(i, &rc);
        int slot = r == 1 ? 0 : r == 0 ? 1 : r == -1 ? 2 : 3;
        counts[owner[i]][slot]++;
        if (r == -1 && an_error) *an_error = rc;
    }
    free(order);
}

static void print_counts(const char *phase, int counts[3][4]) {
    for (int s = 0; s < 3; s++)
        fprintf(stderr, "  %s: server %d (port %d): %d hits, %d misses, %d errors, %d wrong values\n", phase, s,
                ports[s], counts[s][0], counts[s][1], counts[s][2], counts[s][3]);
}

static int own(int s) {
    int n = 0;
    for (int i = 0; i < nkeys; i++) n += owner[i] == s;
    return n;
}

static void phase_fill(void) {
    int bad = 0;
    for (int i = 0; i < nkeys; i++) {
        char key[64];
        key_of(i, key, sizeof key);
        owner[i] = server_index(key);
        if (owner[i] < 0) {
            report("fail fill: key %s maps to no known server", key);
            failed = 1;
            return;
        }
    }
    for (int i = 0; i < nkeys; i++) {
        memcached_return_t rc = set_key(i);
        if (rc != MEMCACHED_SUCCESS && bad++ < 5)
            fprintf(stderr, "ketama: set %d: %s (%s)\n", i, memcached_strerror(m, rc), memcached_last_error_message(m));
    }
    int counts[3][4];
    get_all(counts, NULL);
    print_counts("fill", counts);
    int hits = counts[0][0] + counts[1][0] + counts[2][0];
    if (bad || hits != nkeys) {
        report("fail fill: %d sets failed, %d of %d keys hit", bad, hits, nkeys);
        failed = 1;
        return;
    }
    report("ok fill %d %d %d", own(0), own(1), own(2));
}

static void phase_down_eject(int d);

static void phase_down(int d) {
    if (eject) {
        phase_down_eject(d);
        return;
    }
    int counts[3][4];
    memcached_return_t err = MEMCACHED_SUCCESS;
    get_all(counts, &err);
    print_counts("down", counts);
    char why[512] = "";
    for (int s = 0; s < 3; s++) {
        int n = own(s);
        if (s == d && (counts[s][0] || counts[s][1] || counts[s][3] || counts[s][2] != n))
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     " the dead server's %d keys: %d hits, %d misses, %d errors (all must fail);", n, counts[s][0],
                     counts[s][1], counts[s][2]);
        if (s != d && counts[s][0] != n)
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     " server %d's %d keys: %d hits, %d misses, %d errors, %d wrong (all must hit);", s, n,
                     counts[s][0], counts[s][1], counts[s][2], counts[s][3]);
    }
    /* Sets: every live server's keys are stored (again), the dead one's fail. */
    int set_ok[3] = {0, 0, 0};
    for (int i = 0; i < nkeys; i++) set_ok[owner[i]] += set_key(i) == MEMCACHED_SUCCESS;
    for (int s = 0; s < 3; s++) {
        int want = s == d ? 0 : own(s);
        if (set_ok[s] != want)
            snprintf(why + strlen(why), sizeof why - strlen(why), " sets of server %d's %d keys: %d succeeded, %d expected;",
                     s, own(s), set_ok[s], want);
    }
    if (*why) {
        report("fail down %d:%s", d, why);
        failed = 1;
    } else {
        report("ok down %d: %d keys fail with %s, the other %d hit; sets fail only for its keys", d, own(d),
               memcached_strerror(m, err), nkeys - own(d));
    }
}

/* Where the keys go now that server d is out of the continuum: only its share
 * moves. Each of its keys misses (its new server never had it) and is set
 * there; all others hit. Errors: only the first FAILURE_LIMIT requests that
 * found d dead. */
static void phase_down_eject(int d) {
    int counts[3][4];
    memcached_return_t err = MEMCACHED_SUCCESS;
    get_all(counts, &err);
    print_counts("down (eject)", counts);
    char why[768] = "";
    int errors = counts[0][2] + counts[1][2] + counts[2][2];
    if (errors > EJECT_ERRORS)
        snprintf(why + strlen(why), sizeof why - strlen(why), " %d gets failed (at most %d may, before it is ejected);",
                 errors, EJECT_ERRORS);
    for (int s = 0; s < 3; s++) {
        int n = own(s);
        if (s == d && (counts[s][0] || counts[s][3] || counts[s][1] + counts[s][2] != n))
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     " the ejected server's %d keys: %d hits, %d misses, %d errors, %d wrong (all must miss);", n,
                     counts[s][0], counts[s][1], counts[s][2], counts[s][3]);
        if (s != d && counts[s][0] != n)
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     " server %d's %d keys: %d hits, %d misses, %d errors, %d wrong (all must hit);", s, n,
                     counts[s][0], counts[s][1], counts[s][2], counts[s][3]);
    }
    int moved[3] = {0, 0, 0}, stayed = 0, lost = 0;
    for (int i = 0; i < nkeys; i++) {
        char key[64];
        key_of(i, key, sizeof key);
        int now = server_index(key);
        if (owner[i] != d) {
            stayed += now == owner[i];
        } else if (now >= 0 && now != d) {
            moved[now]++;
        } else {
            lost++;
        }
    }
    if (stayed != nkeys - own(d) || lost)
        snprintf(why + strlen(why), sizeof why - strlen(why),
                 " continuum without server %d: %d of the others' %d keys stayed, %d of its keys still map to it;", d,
                 stayed, nkeys - own(d), lost);
    int set_bad = 0;
    for (int i = 0; i < nkeys; i++) set_bad += set_key(i) != MEMCACHED_SUCCESS;
    if (set_bad) snprintf(why + strlen(why), sizeof why - strlen(why), " %d sets failed;", set_bad);
    int after[3][4];
    get_all(after, NULL);
    int hits = after[0][0] + after[1][0] + after[2][0];
    if (hits != nkeys)
        snprintf(why + strlen(why), sizeof why - strlen(why), " after setting them all, %d of %d hit;", hits, nkeys);
    if (*why) {
        report("fail down %d (eject):%s", d, why);
        failed = 1;
    } else {
        report("ok down %d (eject): its %d keys moved (%d, %d, %d) and missed, %d errors before the ejection (%s); "
               "the other %d stayed and hit; all set and hit", d, own(d), moved[0], moved[1], moved[2], errors,
               errors ? memcached_strerror(m, err) : "none", nkeys - own(d));
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void phase_up(int d) {
    /* Bounded wait for libmemcached to retry the server (retry timeout 1 s,
     * EJECT_RETRY_S with eject). */
    int probe = -1;
    for (int i = 0; i < nkeys; i++)
        if (owner[i] == d) {
            probe = i;
            break;
        }
    double t0 = now_s();
    memcached_return_t rc = MEMCACHED_SUCCESS;
    int r = -1;
    char probe_key[64];
    key_of(probe, probe_key, sizeof probe_key);
    while (now_s() - t0 < 30) {
        r = get_key(probe, &rc);
        /* Ejected, its keys went elsewhere: wait until it is back in the
         * continuum too (the get lets libmemcached rebuild it). */
        if (r >= 0 && (!eject || server_index(probe_key) == d)) break;
        usleep(100000);
    }
    if (r != 0) {
        report("fail up %d: key %d of the restarted server still gives %s after %.0f s (expected a miss)", d, probe,
               r == 1 ? "a hit" : memcached_strerror(m, rc), now_s() - t0);
        failed = 1;
        return;
    }
    double waited = now_s() - t0;
    int counts[3][4];
    get_all(counts, NULL);
    print_counts("up", counts);
    char why[512] = "";
    for (int s = 0; s < 3; s++) {
        int n = own(s);
        int want_slot = s == d ? 1 : 0;
        if (counts[s][want_slot] != n)
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     " server %d's %d keys: %d hits, %d misses, %d errors, %d wrong (all must %s);", s, n,
                     counts[s][0], counts[s][1], counts[s][2], counts[s][3], s == d ? "miss" : "hit");
    }
    generation[d]++;
    int bad = 0;
    for (int i = 0; i < nkeys; i++)
        if (owner[i] == d) bad += set_key(i) != MEMCACHED_SUCCESS;
    get_all(counts, NULL);
    print_counts("up, after storing its keys again", counts);
    int hits = counts[0][0] + counts[1][0] + counts[2][0];
    if (bad || hits != nkeys)
        snprintf(why + strlen(why), sizeof why - strlen(why),
                 " storing its keys again: %d sets failed, then %d of %d keys hit;", bad, hits, nkeys);
    if (*why) {
        report("fail up %d:%s", d, why);
        failed = 1;
    } else {
        report("ok up %d: retried after %.1f s; its %d keys missed, the others hit; stored again, all %d hit", d,
               waited, own(d), nkeys);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PORT0 PORT1 PORT2 [KEYS [eject]]\n", argv[0]);
        return 2;
    }
    for (int s = 0; s < 3; s++) ports[s] = atoi(argv[1 + s]);
    if (argc > 4) nkeys = atoi(argv[4]);
    eject = argc > 5 && strcmp(argv[5], "eject") == 0;
    owner = calloc((size_t)nkeys, sizeof *owner);
    srand(1);
    m = memcached_create(NULL);
    memcached_return_t rc = MEMCACHED_SUCCESS;
#define BEHAVIOR(b, v)                                                                                         \
    do {                                                                                                       \
        if ((rc = memcached_behavior_set(m, b, (uint64_t)(v))) != MEMCACHED_SUCCESS) {                        \
            fprintf(stderr, "ketama: memcached_behavior_set(%s): %s\n", #b, memcached_strerror(m, rc));        \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)
    BEHAVIOR(MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
    BEHAVIOR(MEMCACHED_BEHAVIOR_KETAMA_HASH, MEMCACHED_HASH_MD5);
    BEHAVIOR(MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_MD5);
    BEHAVIOR(MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, eject);
    if (eject) BEHAVIOR(MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT, FAILURE_LIMIT);
    /* s: a server marked dead is retried. With eject, the retry puts the
     * dead server back into the continuum: "down" (two passes over the keys
     * and a pass of sets) must end before it, and on a loaded CI machine it
     * once took longer than 1 s (2 of its keys then failed). */
    BEHAVIOR(MEMCACHED_BEHAVIOR_DEAD_TIMEOUT, eject ? EJECT_RETRY_S : 1);
    BEHAVIOR(MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, eject ? EJECT_RETRY_S : 1);
    BEHAVIOR(MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 1000);    /* ms */
    BEHAVIOR(MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 5000);       /* ms */
    BEHAVIOR(MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    for (int s = 0; s < 3; s++) {
        rc = memcached_server_add(m, "127.0.0.1", (in_port_t)ports[s]);
        if (rc != MEMCACHED_SUCCESS) {
            fprintf(stderr, "ketama: memcached_server_add %d: %s\n", ports[s], memcached_strerror(m, rc));
            return 1;
        }
    }
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        int s = -1;
        if (strncmp(line, "fill", 4) == 0) {
            phase_fill();
        } else if (sscanf(line, "down %d", &s) == 1 && s >= 0 && s < 3) {
            phase_down(s);
        } else if (sscanf(line, "up %d", &s) == 1 && s >= 0 && s < 3) {
            phase_up(s);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            report("fail: unknown command %s", line);
            failed = 1;
        }
    }
    memcached_free(m);
    free(owner);
    return failed;
}
