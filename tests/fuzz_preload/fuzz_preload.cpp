// fuzz_preload.cpp — the differential tester's driver (issue 35, item 2).
//
// For each seed it runs fuzz_preload_scenario (scenario.h) as is, then under
// LD_PRELOAD=libloom-pthread.so with each LOOM_PROCESSORS asked for, each run
// bounded in time and in its own process group, and compares what the
// program printed and how it ended. The plain run is the truth: it must end
// with its "end" line and exit 0 (else the scenario, not loom, is at fault,
// and the tester says so). A preloaded run that prints anything else, ends
// otherwise or does not end in time (a hang is a difference) is confirmed by
// a second plain run (a plain run that does not repeat itself means the
// scenario was not deterministic: a tester bug, reported as such — unless
// loom's run matches that second one, which is said and not counted), then
// shrunk: the fewest steps of the seed's scenario that still differ
// (ddmin over step indices; the scenario program replays the model over
// any subset, skipping steps that are no longer valid there). It prints the
// seed, the first differing line and the replay commands, by seed and by
// steps.
//
//   fuzz_preload --scenario PROG --lib LIB [--seeds A-B | --seconds N [--first S]]
//                [--procs 1,2] [--exclude F,...] [--keep LIST] [--no-shrink]
//                [--max-diffs N] [--timeout SEC] [--dir DIR] [--all] [--verbose]
//
// --all: after a difference, the seed is run again without the step where
// it appeared, until it matches: every difference a seed holds (the
// measurement of how many seeds each bug needs uses it), not only its first.
//
// Exit status: 0 when every run matched, 1 on a difference or a tester
// failure, 2 on bad arguments.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string scenario, lib, exclude, keep = "all", dir;
  long first = 1, last = 0, seconds = 0;
  std::vector<int> procs{1, 2};
  bool shrink = true, verbose = false, all = false;
  int max_diffs = 3;
  double timeout = 20;  // seconds, for a preloaded run (and at least 4x the plain run's time)
};

struct Run {
  std::string out, err;
  int status = 0;
  bool timed_out = false;
  double seconds = 0;
};

// The run in progress, killed with its group if the driver is (ctest's
// timeout, ^C): a preloaded run that hangs must not outlive it.
volatile pid_t running = 0;
char scratch[4096];  // the scratch directory, removed on the way out too
void on_stop(int sig) {
  if (running > 0) kill(-running, SIGKILL);
  rmdir(scratch);  // (empty unless the run was killed between a file's creation and its unlink)
  signal(sig, SIG_DFL);
  raise(sig);
}

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Removes what a killed run left in the scratch directory (its files are
// unlinked by the scenario as soon as they are open, unless it was killed
// in between).
void clean_dir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, "fuzz-", 5) == 0) unlink((dir + "/" + e->d_name).c_str());
  closedir(d);
}

// Runs the scenario program, preloaded (lib non-empty) on procs processors,
// in a process group of its own, killed with its group at the deadline.
Run run(const Options& o, long seed, const std::string& keep, const std::string& lib, int procs, double limit) {
  Run r;
  int po[2], pe[2];
  if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
    r.status = -1;
    return r;
  }
  std::string s = std::to_string(seed);
  std::vector<std::string> args{o.scenario};
  if (!o.exclude.empty()) {
    args.push_back("--exclude");
    args.push_back(o.exclude);
  }
  args.push_back(s);
  args.push_back(keep);
  double t0 = now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(po[1], 1);
    dup2(pe[1], 2);
    unsetenv("LD_PRELOAD");
    if (!lib.empty()) {
      setenv("LD_PRELOAD", lib.c_str(), 1);
      setenv("LOOM_PROCESSORS", std::to_string(procs).c_str(), 1);
    }
    setenv("FUZZ_DIR", o.dir.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);  // (both sides, so that the kill below never misses the group)
  running = pid;
  close(po[1]);
  close(pe[1]);
  pollfd f[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  bool exited = false;
  int open = 2;
  char buf[65536];
  while (open > 0) {
    double left = limit - (now() - t0);
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    if (!exited && waitpid(pid, &r.status, WNOHANG) == pid) exited = true;
    // Once the program has exited, what its leftover children still hold open is not waited for.
    int n = poll(f, 2, exited ? 50 : int(std::min(left, 0.1) * 1000) + 1);
    if (n == 0 && exited) break;
    for (int i = 0; i < 2; ++i) {
      if (f[i].fd < 0 || !(f[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t k = read(f[i].fd, buf, sizeof buf);
      if (k <= 0) {
        close(f[i].fd);
        f[i].fd = -1;
        --open;
      } else {
        (i ? r.err : r.out).append(buf, size_t(k));
      }
    }
  }
  kill(-pid, SIGKILL);  // the group: the program and any child of its steps
  if (!exited) waitpid(pid, &r.status, 0);
  running = 0;
  for (auto& x : f)
    if (x.fd >= 0) close(x.fd);
  r.seconds = now() - t0;
  clean_dir(o.dir);
  return r;
}

bool normal(const Run& r) {
  return !r.timed_out && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && r.out.size() >= 4 &&
         r.out.find(" end\n") != std::string::npos;
}

bool same(const Run& a, const Run& b) { return !a.timed_out && !b.timed_out && a.status == b.status && a.out == b.out; }

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

std::string ending(const Run& r) {
  char b[96];
  if (r.timed_out)
    std::snprintf(b, sizeof b, "timed out after %.1f s", r.seconds);
  else if (WIFEXITED(r.status))
    std::snprintf(b, sizeof b, "exit %d", WEXITSTATUS(r.status));
  else
    std::snprintf(b, sizeof b, "killed by signal %d", WIFSIGNALED(r.status) ? WTERMSIG(r.status) : -1);
  return b;
}

// What kind of difference: the operation of the glibc line where the two
// part (shrinking keeps to it, so that it does not wander to another bug).
std::string diff_key(const Run& plain, const Run& loom) {
  auto a = lines(plain.out), b = lines(loom.out);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i >= a.size()) return "(status)";
  std::istringstream in(a[i]);
  std::string idx, op;
  in >> idx >> op;
  return op;
}

// The step index of the glibc line where they part (-1: the status only).
int diff_step(const Run& plain, const Run& loom) {
  auto a = lines(plain.out), b = lines(loom.out);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  int k = -1;
  if (i < a.size()) std::sscanf(a[i].c_str(), "#%d", &k);
  return k;
}

// The first line where they part, both sides ("(nothing)" past the end).
void first_difference(const Run& plain, const Run& loom, const char* indent) {
  auto a = lines(plain.out), b = lines(loom.out);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) {
    std::printf("%sthe same output; glibc: %s, loom: %s\n", indent, ending(plain).c_str(), ending(loom).c_str());
    return;
  }
  std::printf("%sglibc: %s\n", indent, i < a.size() ? a[i].c_str() : "(nothing more)");
  std::printf("%sloom:  %s%s\n", indent, i < b.size() ? b[i].c_str() : "(nothing more)",
              i < b.size() ? "" : ("; " + ending(loom)).c_str());
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    // ranges: 3-7
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    s += std::to_string(v[i]);
    if (j > i + 1) {
      s += "-" + std::to_string(v[j]);
      i = j;
    }
  }
  return s;
}

// The step indices a run printed (each line starts "#<step> "; the last is "end").
std::vector<int> steps_of(const Run& r) {
  std::vector<int> v;
  for (auto& l : lines(r.out)) {
    int k;
    if (std::sscanf(l.c_str(), "#%d ", &k) == 1 && l.compare(l.find(' ') + 1, 3, "end") != 0) v.push_back(k);
  }
  return v;
}

struct Verdict {
  bool differs = false, plain_ok = true;
  Run plain, loom;
};

Verdict check(const Options& o, long seed, const std::string& keep, int procs, double limit) {
  Verdict v;
  v.plain = run(o, seed, keep, "", 0, 30);
  if (!normal(v.plain)) {
    v.plain_ok = false;
    return v;
  }
  double lim = std::max(limit, 4 * v.plain.seconds + 5);
  v.loom = run(o, seed, keep, o.lib, procs, lim);
  v.differs = !same(v.plain, v.loom);
  return v;
}

// ddmin over the steps: the fewest that still differ (each candidate run
// plain, then preloaded; a candidate whose plain run is not normal does
// not count).
std::vector<int> shrink(const Options& o, long seed, int procs, std::vector<int> steps, double limit,
                        const std::string& key) {
  auto differs = [&](const std::vector<int>& s) {
    if (s.empty()) return false;
    Verdict v = check(o, seed, join(s), procs, limit);
    return v.plain_ok && v.differs && diff_key(v.plain, v.loom) == key;
  };
  size_t n = 2;
  double t0 = now();
  while (steps.size() >= 2 && now() - t0 < 600) {
    size_t chunk = (steps.size() + n - 1) / n;
    bool reduced = false;
    for (size_t i = 0; i < steps.size() && !reduced; i += chunk) {
      std::vector<int> part(steps.begin() + long(i), steps.begin() + long(std::min(steps.size(), i + chunk)));
      std::vector<int> rest(steps.begin(), steps.begin() + long(i));
      rest.insert(rest.end(), steps.begin() + long(std::min(steps.size(), i + chunk)), steps.end());
      if (differs(part)) {
        steps = part;
        n = 2;
        reduced = true;
      } else if (differs(rest)) {
        steps = rest;
        n = std::max<size_t>(n - 1, 2);
        reduced = true;
      }
    }
    if (!reduced) {
      if (n >= steps.size()) break;
      n = std::min(steps.size(), n * 2);
    }
  }
  return steps;
}

std::string replay_cmd(const Options& o, long seed, const std::string& keep, int procs) {
  std::string s = "LD_PRELOAD=" + o.lib + " LOOM_PROCESSORS=" + std::to_string(procs) + " " + o.scenario;
  if (!o.exclude.empty()) s += " --exclude " + o.exclude;
  return s + " " + std::to_string(seed) + " " + keep;
}

struct Stats {
  long seeds = 0, runs = 0, diffs = 0, failures = 0;
  long unsteady = 0;  // seeds whose plain runs differed, loom's matching one of them
};
std::vector<int> last_steps;  // the steps the last plain run of check_seed made

// One seed (with these steps) plainly and preloaded on each processor
// count: the step index of the first difference found, or -1.
int check_seed(const Options& o, long seed, const std::string& keep, Stats& st) {
  Run plain = run(o, seed, keep, "", 0, 30);
  ++st.runs;
  last_steps = steps_of(plain);
  if (!normal(plain)) {
    ++st.failures;
    std::printf("fuzz_preload: TESTER FAILURE seed %ld: the plain run did not end normally (%s)\n", seed,
                ending(plain).c_str());
    std::printf("  replay: %s %ld %s\n%s", o.scenario.c_str(), seed, keep.c_str(), plain.err.c_str());
    return -1;
  }
  for (int p : o.procs) {
    double lim = std::max(o.timeout, 4 * plain.seconds + 5);
    Run loom = run(o, seed, keep, o.lib, p, lim);
    ++st.runs;
    if (o.verbose)
      std::printf("seed %ld procs %d: glibc %.2f s, loom %.2f s%s\n", seed, p, plain.seconds, loom.seconds,
                  same(plain, loom) ? "" : " DIFFERS");
    if (same(plain, loom)) continue;
    Run again = run(o, seed, keep, "", 0, 30);
    ++st.runs;
    if (!same(plain, again) && normal(again) && same(again, loom)) {
      // glibc itself gave two answers (a timed wait that a loaded machine
      // let expire: CI once, a timed REQUEUE's waiter woken, then timed
      // out), and loom gave one of them: no difference of loom's. Said,
      // not counted; a scenario that does this often is worth a look.
      ++st.unsteady;
      std::printf("fuzz_preload: seed %ld: two plain runs differ and loom's matches the second (not counted)\n", seed);
      first_difference(plain, again, "  ");
      continue;
    }
    if (!same(plain, again)) {
      ++st.failures;
      std::printf("fuzz_preload: TESTER FAILURE seed %ld: two plain runs differ (the scenario is not deterministic)\n",
                  seed);
      first_difference(plain, again, "  ");
      std::printf("  replay: %s %ld %s\n", o.scenario.c_str(), seed, keep.c_str());
      return -1;
    }
    ++st.diffs;
    int at = diff_step(plain, loom);
    std::printf("fuzz_preload: DIFFERENCE seed %ld, LOOM_PROCESSORS=%d, step %d, %s (glibc %s, loom %s)\n", seed, p, at,
                diff_key(plain, loom).c_str(), ending(plain).c_str(), ending(loom).c_str());
    first_difference(plain, loom, "  ");
    std::printf("  replay: fuzz_preload --scenario %s --lib %s --seed %ld%s%s --procs %d%s%s\n", o.scenario.c_str(),
                o.lib.c_str(), seed, keep == "all" ? "" : " --keep ", keep == "all" ? "" : keep.c_str(), p,
                o.exclude.empty() ? "" : " --exclude ", o.exclude.c_str());
    std::printf("     or: %s\n", replay_cmd(o, seed, keep, p).c_str());
    if (!loom.err.empty() && o.verbose) std::printf("  loom's stderr:\n%s", loom.err.c_str());
    if (o.shrink && st.diffs <= o.max_diffs) {
      std::vector<int> steps = last_steps;
      double s0 = now();
      std::vector<int> small = shrink(o, seed, p, steps, lim, diff_key(plain, loom));
      Verdict v;
      for (int tries = 0; tries < 3 && !(v.plain_ok && v.differs); ++tries) {  // (an intermittent one may need more)
        v = check(o, seed, join(small), p, lim);
        st.runs += 2;
      }
      std::printf("  shrunk to %zu of %zu steps (%.0f s): %s\n", small.size(), steps.size(), now() - s0,
                  join(small).c_str());
      if (v.plain_ok && v.differs) {
        first_difference(v.plain, v.loom, "    ");
        std::printf("    glibc's output:\n");
        for (auto& l : lines(v.plain.out)) std::printf("      %s\n", l.c_str());
      } else {
        std::printf("    (the shrunk scenario did not differ again: the difference is intermittent)\n");
      }
      std::printf("  replay: fuzz_preload --scenario %s --lib %s --seed %ld --keep %s --procs %d%s%s\n",
                  o.scenario.c_str(), o.lib.c_str(), seed, join(small).c_str(), p,
                  o.exclude.empty() ? "" : " --exclude ", o.exclude.c_str());
      std::printf("     or: %s\n", replay_cmd(o, seed, join(small), p).c_str());
    }
    return at;  // one difference a run
  }
  return -1;
}

int usage() {
  std::fprintf(stderr,
               "usage: fuzz_preload --scenario PROG --lib LIB [--seeds A-B | --seconds N [--first S]] [--procs 1,2]\n"
               "                    [--exclude F,...] [--keep LIST] [--no-shrink] [--max-diffs N] [--timeout SEC]\n"
               "                    [--dir DIR] [--all] [--verbose]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--scenario") {
      o.scenario = next();
    } else if (a == "--lib") {
      o.lib = next();
    } else if (a == "--seeds") {
      std::string s = next();
      if (std::sscanf(s.c_str(), "%ld-%ld", &o.first, &o.last) != 2) {
        if (std::sscanf(s.c_str(), "%ld", &o.first) != 1) return usage();
        o.last = o.first;
      }
    } else if (a == "--seed") {
      o.first = o.last = std::atol(next().c_str());
    } else if (a == "--first") {
      o.first = std::atol(next().c_str());
    } else if (a == "--seconds") {
      o.seconds = std::atol(next().c_str());
    } else if (a == "--procs") {
      o.procs.clear();
      std::string s = next();
      for (char* p = std::strtok(&s[0], ","); p; p = std::strtok(nullptr, ",")) o.procs.push_back(std::atoi(p));
    } else if (a == "--exclude") {
      o.exclude = next();
    } else if (a == "--keep") {
      o.keep = next();
    } else if (a == "--no-shrink") {
      o.shrink = false;
    } else if (a == "--max-diffs") {
      o.max_diffs = std::atoi(next().c_str());
    } else if (a == "--timeout") {
      o.timeout = std::atof(next().c_str());
    } else if (a == "--dir") {
      o.dir = next();
    } else if (a == "--all") {
      o.all = true;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else {
      return usage();
    }
  }
  if (o.scenario.empty() || o.lib.empty() || o.procs.empty() || (o.last < o.first && o.seconds <= 0)) return usage();
  for (std::string* p : {&o.scenario, &o.lib}) {
    char* real = realpath(p->c_str(), nullptr);
    if (!real) {
      std::fprintf(stderr, "fuzz_preload: %s: %s\n", p->c_str(), std::strerror(errno));
      return 2;
    }
    *p = real;
    std::free(real);
  }
  // A scratch directory on a disk file system (the cache must be able to miss).
  std::string base = o.dir.empty() ? "." : o.dir;
  std::string tmpl = base + "/fuzz_preload.XXXXXX";
  if (!mkdtemp(&tmpl[0])) {
    std::fprintf(stderr, "fuzz_preload: mkdtemp in %s: %s\n", base.c_str(), std::strerror(errno));
    return 2;
  }
  o.dir = tmpl;
  std::snprintf(scratch, sizeof scratch, "%s", tmpl.c_str());
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, on_stop);

  double t0 = now();
  Stats st;
  for (long seed = o.first;; ++seed) {
    if (o.seconds > 0 ? now() - t0 >= double(o.seconds) : seed > o.last) break;
    ++st.seeds;
    // With --all, each difference's first step is left out and the seed run
    // again, until it matches: every difference a seed holds, not only its first.
    std::string keep = o.keep;
    for (int round = 0; round < (o.all ? 12 : 1); ++round) {
      int at = check_seed(o, seed, keep, st);
      if (at < 0) break;
      std::vector<int> rest;
      for (int k : last_steps)
        if (k != at) rest.push_back(k);
      if (rest.empty()) break;
      keep = join(rest);
    }
  }
  long seeds = st.seeds, runs = st.runs, diffs = st.diffs, failures = st.failures;
  rmdir(o.dir.c_str());
  std::printf("fuzz_preload: %ld seeds (%ld-%ld), %ld runs in %.0f s; %ld difference%s, %ld tester failure%s, %ld unsteady\n",
              seeds, o.first, o.first + seeds - 1, runs, now() - t0, diffs, diffs == 1 ? "" : "s", failures,
              failures == 1 ? "" : "s", st.unsteady);
  return diffs || failures ? 1 : 0;
}
