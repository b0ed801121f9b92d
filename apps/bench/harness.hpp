// apps/bench/harness.hpp — what every micro-benchmark program shares.
//
// A program is a list of rows (yield, create_join, ...). Each row is a
// function `double run(uint64_t n)` that performs n operations and returns
// the nanoseconds they took, timed by the function itself (so set-up that is
// not the operation — making a cluster, entering a fibre — stays outside).
// The harness owns everything else, identically for every system measured:
//
//   warm-up   run(n) with n doubling, for --warmup seconds; the last batch
//             gives the rate that sizes a repeat (--duration seconds), so a
//             1 µs operation and a 10 ns one are measured for equal time;
//   repeats   --repeats runs of run(n); the row's figure is their median;
//   output    one JSON object per row on stdout, numbers as numbers.
//
// Bad command lines go to stderr with the program's name, and exit 2.
// Header-only: the peers (pthread, fcontext, Boost.Fiber) must not link loom.
#pragma once

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bench {

inline std::uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- JSON, just enough: one flat object per line ----------------------------

inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no inf/nan
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

class Json {
 public:
  Json& add(const char* key, const std::string& v) { return raw(key, json_quote(v)); }
  Json& add(const char* key, const char* v) { return raw(key, json_quote(v)); }
  Json& add(const char* key, double v) { return raw(key, json_number(v)); }
  Json& add(const char* key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  Json& add(const char* key, unsigned v) { return raw(key, std::to_string(v)); }
  Json& add(const char* key, int v) { return raw(key, std::to_string(v)); }
  Json& add(const char* key, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_number(v[i]);
    return raw(key, s + "]");
  }
  Json& raw(const char* key, const std::string& value) {
    body_ += (body_.empty() ? "" : ",") + json_quote(key) + ":" + value;
    return *this;
  }
  // Writes the object as one line and flushes, so a driver reading a pipe
  // sees each row as soon as it is measured.
  void print() const {
    std::printf("{%s}\n", body_.c_str());
    std::fflush(stdout);
  }

 private:
  std::string body_;
};

// ---- command line ------------------------------------------------------------

struct RowInfo {
  const char* name;
  const char* measures;  // one line for --help
};

struct Options {
  std::vector<std::string> benches;  // rows to run, in the program's order
  std::uint64_t iterations = 0;      // per repeat; 0: sized from the warm-up
  double duration_s = 0.5;           // target length of one repeat
  double warmup_s = 1.0;             // BENCHMARKS.md: warm up 1 s
  unsigned repeats = 5;

  bool wants(const char* row) const { return std::find(benches.begin(), benches.end(), row) != benches.end(); }
};

[[noreturn]] inline void usage_error(const char* prog, const std::string& msg) {
  std::fprintf(stderr, "%s: %s (try --help)\n", prog, msg.c_str());
  std::exit(2);
}

// Strict parsers: the whole string must be the number, or it is an error.
inline std::uint64_t parse_count(const char* prog, const char* flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = (s && *s && *s != '-') ? std::strtoull(s, &end, 10) : 0;
  if (!s || !*s || *s == '-' || *end != '\0' || errno != 0 || v == 0)
    usage_error(prog, std::string("bad value '") + (s ? s : "") + "' for " + flag + " (want a positive integer)");
  return v;
}

inline double parse_seconds(const char* prog, const char* flag, const char* s, bool allow_zero) {
  char* end = nullptr;
  double v = (s && *s) ? std::strtod(s, &end) : -1;
  if (!s || !*s || *end != '\0' || !std::isfinite(v) || v < 0 || (!allow_zero && v == 0) || v > 3600)
    usage_error(prog, std::string("bad value '") + (s ? s : "") + "' for " + flag + " (want seconds, " +
                          (allow_zero ? "0" : "above 0") + " to 3600)");
  return v;
}

inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Walks argv as `--flag value` or `--flag=value`. `extra` may consume flags of
// its own program (it returns false for a flag it does not know).
class ArgWalker {
 public:
  ArgWalker(const char* prog, int argc, char** argv) : prog_(prog), argc_(argc), argv_(argv) {}
  // Next flag name, or nullptr at the end.
  const char* next() {
    if (i_ >= argc_) return nullptr;
    const char* a = argv_[i_++];
    if (std::strncmp(a, "--", 2) != 0) usage_error(prog_, std::string("unexpected argument '") + a + "'");
    const char* eq = std::strchr(a, '=');
    if (eq) {
      flag_.assign(a, eq);
      inline_value_ = eq + 1;
    } else {
      flag_ = a;
      inline_value_ = nullptr;
    }
    return flag_.c_str();
  }
  const char* value() {
    if (inline_value_) return std::exchange(inline_value_, nullptr);
    if (i_ >= argc_) usage_error(prog_, "missing value after " + flag_);
    return argv_[i_++];
  }
  const std::string& flag() const { return flag_; }

 private:
  const char* prog_;
  int argc_;
  char** argv_;
  int i_ = 1;
  std::string flag_;
  const char* inline_value_ = nullptr;
};

inline void print_micro_help(const char* prog, const char* system, const std::vector<RowInfo>& rows,
                             const char* extra) {
  std::printf(
      "usage: %s [--bench ROW[,ROW...]] [--iterations N | --duration S] [--warmup S] [--repeats R]\n"
      "Measures %s; prints one JSON object per row on stdout (ns_per_op = median of the repeats).\n"
      "  --bench LIST      rows to run (default: all)\n"
      "  --iterations N    operations per repeat (default: sized from the warm-up to --duration)\n"
      "  --duration S      target seconds per repeat (default 0.5)\n"
      "  --warmup S        warm-up seconds per row before measuring (default 1; 0 = only size the repeat)\n"
      "  --repeats R       repeats per row (default 5)\n"
      "rows:\n",
      prog, system);
  for (const RowInfo& r : rows) std::printf("  %-13s %s\n", r.name, r.measures);
  if (extra) std::printf("%s", extra);
}

inline Options parse_micro(const char* prog, const char* system, int argc, char** argv,
                           const std::vector<RowInfo>& rows, const char* help_extra = nullptr) {
  Options o;
  for (const RowInfo& r : rows) o.benches.push_back(r.name);
  ArgWalker w(prog, argc, argv);
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      print_micro_help(prog, system, rows, help_extra);
      std::exit(0);
    } else if (flag == "--bench") {
      std::vector<std::string> picked;
      for (const std::string& name : split_commas(w.value())) {
        bool known = std::any_of(rows.begin(), rows.end(), [&](const RowInfo& r) { return name == r.name; });
        if (!known) {
          std::string list;
          for (const RowInfo& r : rows) list += std::string(list.empty() ? "" : ", ") + r.name;
          usage_error(prog, "unknown bench '" + name + "' (this program has: " + list + ")");
        }
        picked.push_back(name);
      }
      o.benches.clear();
      for (const RowInfo& r : rows)  // keep the program's order
        if (std::find(picked.begin(), picked.end(), r.name) != picked.end()) o.benches.push_back(r.name);
    } else if (flag == "--iterations") {
      o.iterations = parse_count(prog, "--iterations", w.value());
    } else if (flag == "--duration") {
      o.duration_s = parse_seconds(prog, "--duration", w.value(), false);
    } else if (flag == "--warmup") {
      o.warmup_s = parse_seconds(prog, "--warmup", w.value(), true);
    } else if (flag == "--repeats") {
      std::uint64_t r = parse_count(prog, "--repeats", w.value());
      if (r > 1000) usage_error(prog, "bad value for --repeats (at most 1000)");
      o.repeats = static_cast<unsigned>(r);
    } else {
      usage_error(prog, "unknown flag '" + flag + "'");
    }
  }
  return o;
}

// ---- measuring ---------------------------------------------------------------

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Measurement {
  double ns_per_op = 0;          // median of samples
  std::vector<double> samples;   // ns per op, one per repeat
  std::uint64_t iterations = 0;  // operations per repeat
  double warmup_s = 0;           // spent warming up (and sizing)
};

// run(n) performs n operations and returns the nanoseconds they took.
using RunFn = std::function<double(std::uint64_t)>;

inline Measurement measure(const Options& o, const RunFn& run) {
  Measurement m;
  const std::uint64_t start = now_ns();
  std::uint64_t n = o.iterations;
  if (n == 0) {
    // Doubling batches until the warm-up time is spent and the last batch is
    // long enough (a twentieth of a repeat, at least 1 ms) to give a rate.
    const double min_batch_ns = std::max(1e6, o.duration_s * 1e9 / 20);
    std::uint64_t batch = 1;
    double rate = 0;  // operations per ns
    for (;;) {
      double t = run(batch);
      if (t >= min_batch_ns) rate = batch / t;
      if (rate > 0 && (now_ns() - start) >= o.warmup_s * 1e9) break;
      if (t < min_batch_ns && batch < (std::uint64_t(1) << 40)) batch *= 2;
    }
    n = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.duration_s * 1e9 * rate));
  } else {
    while ((now_ns() - start) < o.warmup_s * 1e9) run(n);
  }
  m.warmup_s = (now_ns() - start) / 1e9;
  m.iterations = n;
  for (unsigned r = 0; r < o.repeats; ++r) m.samples.push_back(run(n) / n);
  m.ns_per_op = median(m.samples);
  return m;
}

// The first CPU this process may run on (what taskset gave it).
inline int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

inline std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string s;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

// Peak resident memory of this process so far (getrusage), in KiB.
inline std::uint64_t max_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss);
}

// The common part of a micro row; the caller adds its own keys and prints.
inline Json micro_row(const char* bench, const char* system, const std::string& variant, const Measurement& m,
                      const char* op) {
  Json j;
  j.add("bench", bench)
      .add("system", system)
      .add("variant", variant)
      .add("ns_per_op", m.ns_per_op)
      .add("op", op)
      .add("iterations", m.iterations)
      .add("repeats", static_cast<unsigned>(m.samples.size()))
      .add("samples_ns", m.samples)
      .add("min_ns", *std::min_element(m.samples.begin(), m.samples.end()))
      .add("max_ns", *std::max_element(m.samples.begin(), m.samples.end()))
      .add("warmup_s", m.warmup_s)
      .add("cpus", allowed_cpus())
      .add("max_rss_kib", max_rss_kib());
  return j;
}

}  // namespace bench
