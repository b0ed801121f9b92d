/* gen.c — the generator: a scenario from a seed, each step drawn with
 * parameters that fit the model's state and kept only if valid there
 * (model.c); and a step, and a feature, in words (scenario.h). */
#include <stdio.h>
#include <string.h>

#include "scenario.h"

static int is_socket(int k) { return k == K_UNIX || k == K_UDGRAM || k == K_TCP || k == K_LISTEN; }

static const char* kFeatures[X_NFEATURES] = {"evict",      "shmfutex",   "bitset",   "signalfd",  "eintr",  "rtqueue",
                                             "zeroio",     "closerange", "rawclose", "futexargs", "rawdup", "waitall",
                                             "offloadhog", "notsock",    "selfsig",  "sendfile0"};

const char* feature_name(int bit) { return bit >= 0 && bit < X_NFEATURES ? kFeatures[bit] : "?"; }

unsigned feature_parse(const char* list) {
  unsigned mask = 0;
  while (list && *list) {
    const char* end = strchr(list, ',');
    size_t len = end ? (size_t)(end - list) : strlen(list);
    int minus = len && *list == '-';
    const char* name = list + minus;
    size_t nlen = len - (size_t)minus;
    unsigned bits = ~0u;
    if (nlen == 5 && strncmp(name, "known", 5) == 0) {
      bits = X_KNOWN;
    } else if (nlen == 4 && strncmp(name, "none", 4) == 0) {
      bits = 0;
    } else {
      for (int i = 0; i < X_NFEATURES; ++i)
        if (strlen(kFeatures[i]) == nlen && strncmp(name, kFeatures[i], nlen) == 0) bits = 1u << i;
    }
    if (bits == ~0u && len) return ~0u;
    if (bits != ~0u) mask = minus ? mask & ~bits : mask | bits;
    list = end ? end + 1 : NULL;
  }
  return mask;
}

/* ---- the generator -------------------------------------------------------------------- */

typedef struct {
  uint64_t x;
} Rng;
static uint32_t rnd(Rng* g) {
  g->x = mix64(g->x);
  return (uint32_t)(g->x >> 32);
}
static int below(Rng* g, int n) { return n > 0 ? (int)(rnd(g) % (uint32_t)n) : 0; }

static int pick_open(const Model* m, Rng* g) {
  int c[kSlots], n = 0;
  for (int i = 0; i < kSlots; ++i)
    if (m->s[i].ofd >= 0) c[n++] = i;
  return n ? c[below(g, n)] : -1;
}
static int pick_free(const Model* m, Rng* g, int not1, int not2) {
  int c[kSlots], n = 0;
  for (int i = 0; i < kSlots; ++i)
    if (m->s[i].ofd < 0 && i != not1 && i != not2) c[n++] = i;
  return n ? c[below(g, n)] : -1;
}
/* An open slot of one of the kinds in mask (1 << kind), else any open one. */
static int pick_kind(const Model* m, Rng* g, unsigned mask) {
  int c[kSlots], n = 0;
  for (int i = 0; i < kSlots; ++i)
    if (m->s[i].ofd >= 0 && (mask >> m->o[m->s[i].ofd].kind) & 1) c[n++] = i;
  return n ? c[below(g, n)] : pick_open(m, g);
}

/* An open slot whose read would wait now (what a blocked read or poll wants), else any open one. */
static int pick_blocking(const Model* m, Rng* g) {
  int c[kSlots], n = 0;
  for (int i = 0; i < kSlots; ++i)
    if (m->s[i].ofd >= 0 && read_outcome(m, m->s[i].ofd, 8192) == R_BLOCKS) c[n++] = i;
  return n ? c[below(g, n)] : pick_open(m, g);
}

/* An open slot of the peer of slot s's description (or of the description itself). */
static int pick_peer(const Model* m, Rng* g, int s, int self) {
  if (s < 0) return -1;
  int want = self ? m->s[s].ofd : m->o[m->s[s].ofd].peer;
  int c[kSlots], n = 0;
  for (int i = 0; i < kSlots; ++i)
    if (want >= 0 && m->s[i].ofd == want) c[n++] = i;
  return n ? c[below(g, n)] : -1;
}

/* Weights: descriptors and their flags most, then I/O, then the episodes. */
static const struct {
  int op, weight;
} kWeights[] = {
    {OP_PIPE, 5},    {OP_SOCKPAIR, 5}, {OP_TCP, 3},      {OP_FILE, 4},     {OP_EVENTFD, 3}, {OP_DEV, 3},
    {OP_FIFO, 2},    {OP_PTY, 2},      {OP_TIMERFD, 1},  {OP_SETNB, 10},   {OP_CLOEXEC, 3}, {OP_GETFL, 5},
    {OP_DUP, 8},     {OP_CLOSE, 6},    {OP_BADFD, 1},    {OP_READ, 14},    {OP_WRITE, 12},  {OP_BLOCKED, 12},
    {OP_FOREVER, 2}, {OP_ACCEPT, 4},   {OP_SHUTDOWN, 2}, {OP_POLL, 5},     {OP_BPOLL, 3},   {OP_LSEEK, 3},
    {OP_EVICT, 2},   {OP_SHARED, 8},   {OP_FORK, 5},     {OP_FUTEX, 5},    {OP_FUTEX1, 2},  {OP_SIGNAL, 4},
    {OP_PIPES, 2},   {OP_SYNC, 2},     {OP_SLEEP, 1},    {OP_SENDFILE, 2},
};

static void fill(const Model* m, Rng* g, Step* st) {
  st->s[0] = st->s[1] = st->s[2] = -1;
  st->a = below(g, 1 << 16);
  st->b = below(g, 1 << 16);
  st->c = below(g, 1 << 16);
  st->d = below(g, 1 << 16);
  st->r = rnd(g);
  switch (st->op) {
    case OP_PIPE:
    case OP_SOCKPAIR:
    case OP_FIFO:
    case OP_PTY:
      st->s[0] = pick_free(m, g, -1, -1);
      st->s[1] = pick_free(m, g, st->s[0], -1);
      break;
    case OP_TCP:
      st->s[0] = pick_free(m, g, -1, -1);
      st->s[1] = pick_free(m, g, st->s[0], -1);
      st->s[2] = below(g, 3) == 0 ? pick_free(m, g, st->s[0], st->s[1]) : -1;
      break;
    case OP_FILE:
    case OP_EVENTFD:
    case OP_DEV:
    case OP_TIMERFD:
      st->s[0] = pick_free(m, g, -1, -1);
      /* Files: mostly small, so that their reads are many. */
      if (st->op == OP_FILE && below(g, 3)) st->a = below(g, 4);
      if (st->op == OP_FILE && (m->exclude & X_EVICT)) st->c = 3 * below(g, 1000); /* fully cached */
      break;
    case OP_DUP:
      st->s[0] = pick_open(m, g);
      st->s[1] = pick_free(m, g, -1, -1);
      st->s[2] = pick_open(m, g);
      break;
    case OP_FOREVER:
      st->s[0] = pick_blocking(m, g);
      break;
    case OP_BLOCKED:
      st->s[0] = pick_blocking(m, g);
      st->c = below(g, 5);
      st->s[1] = pick_peer(m, g, st->s[0], st->c >= 3);
      st->d = below(g, 6);
      break;
    case OP_BPOLL:
      st->s[0] = pick_blocking(m, g);
      st->s[1] = pick_peer(m, g, st->s[0], 0);
      break;
    case OP_FORK:
      st->s[0] = pick_open(m, g);
      st->s[1] = pick_peer(m, g, st->s[0], 0);
      break;
    case OP_POLL:
      st->s[0] = pick_open(m, g);
      st->s[1] = below(g, 2) ? pick_open(m, g) : -1;
      st->s[2] = below(g, 3) == 0 ? pick_open(m, g) : -1;
      break;
    case OP_SENDFILE:
      st->s[0] = pick_kind(m, g, 1u << K_PIPE_W | 1u << K_UNIX | 1u << K_TCP | 1u << K_NULL);
      st->s[1] = pick_kind(m, g, 1u << K_FILE);
      break;
    case OP_SHARED:
      st->s[0] = pick_kind(m, g, 1u << K_FILE);
      st->d = (below(g, 2) ? 2 : below(g, 4)) | below(g, 2) << 2; /* patchy half the time */
      break;
    case OP_EVICT:
      st->s[0] = pick_kind(m, g, 1u << K_FILE);
      break;
    case OP_ACCEPT:
      st->s[0] = pick_kind(m, g, 1u << K_LISTEN);
      st->s[1] = pick_free(m, g, -1, -1);
      st->s[2] = pick_free(m, g, st->s[1], -1);
      break;
    case OP_READ:
    case OP_WRITE: {
      /* Socket calls on other kinds (ENOTSOCK) now and then only. */
      st->s[0] = pick_open(m, g);
      int k = st->s[0] >= 0 ? m->o[m->s[st->s[0]].ofd].kind : K_NONE;
      if (!is_socket(k) && below(g, 5)) {
        static const int rc[] = {RC_READ, RC_READV, RC_READ, RC_PREAD, RC_FAULT};
        static const int wc[] = {WC_WRITE, WC_WRITEV, WC_WRITE, WC_PWRITE, WC_FAULT};
        st->b = st->op == OP_READ ? rc[below(g, 5)] : wc[below(g, 5)];
      }
      break;
    }
    default:
      st->s[0] = pick_open(m, g);
      break;
  }
}

void generate(Scenario* sc, uint64_t seed, unsigned exclude) {
  Rng g = {seed * 0x2545f4914f6cdd1dull + 1};
  Model m;
  model_init(&m, exclude);
  sc->seed = seed;
  sc->n = 0;
  int total = 0;
  for (unsigned i = 0; i < sizeof kWeights / sizeof kWeights[0]; ++i) total += kWeights[i].weight;
  int want = 16 + below(&g, 40);
  for (int tries = 0; sc->n < want && tries < want * 60; ++tries) {
    int w = below(&g, total), op = 0;
    for (unsigned i = 0; i < sizeof kWeights / sizeof kWeights[0]; ++i) {
      if (w < kWeights[i].weight) {
        op = kWeights[i].op;
        break;
      }
      w -= kWeights[i].weight;
    }
    Step st;
    memset(&st, 0, sizeof st);
    st.op = op;
    fill(&m, &g, &st);
    if (!step_valid(&m, &st)) continue;
    step_apply(&m, &st);
    sc->step[sc->n++] = st;
  }
}

/* ---- a step in words ------------------------------------------------------------------ */

static const char* kOpNames[OP_NOPS] = {
    "pipe",   "socketpair",   "tcp",   "file",         "eventfd",      "dev",     "fifo",
    "pty",    "timerfd",      "setnb", "cloexec",      "getfl",        "dup",     "close",
    "badfd",  "read",         "write", "blocked-read", "forever-read", "accept",  "shutdown",
    "poll",   "blocked-poll", "lseek", "evict",        "shared-read",  "fork",    "futex",
    "futex1", "signal",       "pipes", "sync",         "sleep",        "sendfile"};

const char* op_name(int op) { return op >= 0 && op < OP_NOPS ? kOpNames[op] : "?"; }

void describe(const Step* st, char* buf, int len) {
  snprintf(buf, (size_t)len, "%s s%d s%d s%d a=%d b=%d c=%d d=%d r=%u", op_name(st->op), st->s[0], st->s[1], st->s[2],
           st->a, st->b, st->c, st->d, st->r);
}
