// apps/mcload — a closed-loop memcached load generator, a neutral client for
// the memcached port's benchmark (scripts/bench memcached): plain epoll on
// kernel threads, nothing of loom in it.
//
// A run: read the server's `stats`; store every key of the key space (so
// gets hit); warm up; measure for --duration; stop sending and wait for
// every outstanding reply; read `stats` again. The server's cmd_get,
// cmd_set, get_hits and get_misses must have moved by exactly what mcload
// sent and saw (memcached counts a multiget's keys one by one): a mismatch
// means lost or miscounted requests, and mcload says so and exits 1. The
// check assumes no other client uses the server meanwhile (--no-validate
// otherwise).
//
// Output, one JSON line: ops_per_s (requests completed per second while
// measuring: a multiget is one request; get_keys_per_s counts its keys),
// gets, sets, hits, misses, errors, latency percentiles (µs, from a
// request's send to the read that completed its reply), and the server's
// counter deltas.
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"
#include "protocol.hpp"
#include "worker.hpp"

using namespace mcload;

namespace {

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "mcload: %s\n", msg.c_str());
  std::exit(1);
}

sockaddr_in resolve(const Options& o) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(o.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) fail("cannot resolve '" + o.host + "': " + gai_strerror(rc));
  sockaddr_in a;
  std::memcpy(&a, res->ai_addr, sizeof a);
  a.sin_port = htons(o.port);
  freeaddrinfo(res);
  return a;
}

// A blocking connection for `stats` and the preload.
class Control {
 public:
  Control(const sockaddr_in& addr, const Options& o) : o_(o) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
      fail("cannot connect to " + o.host + ":" + std::to_string(o.port) + ": " + std::strerror(errno));
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Control() { close(fd_); }

  void send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("send to the server while " + doing_ + ": " + std::strerror(errno));
      off += size_t(n);
    }
  }
  void read_more() {
    char buf[65536];
    ssize_t n;
    do n = recv(fd_, buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    if (n == 0) fail("the server closed the connection while " + doing_);
    if (n < 0) fail("no reply from the server while " + doing_ + ": " + std::strerror(errno));
    in_.append(buf, size_t(n));
  }

  std::map<std::string, std::string> stats(const char* when) {
    doing_ = std::string("reading its stats ") + when;
    send_all("stats\r\n");
    std::map<std::string, std::string> m;
    for (;;) {
      size_t e = in_.find("\r\n");
      while (e == std::string::npos) {
        read_more();
        e = in_.find("\r\n");
      }
      std::string line = in_.substr(0, e);
      in_.erase(0, e + 2);
      if (line == "END") return m;
      if (line.compare(0, 5, "STAT ") != 0) fail("unexpected reply to stats: '" + line.substr(0, 80) + "'");
      size_t sp = line.find(' ', 5);
      if (sp == std::string::npos) fail("malformed stats line: '" + line.substr(0, 80) + "'");
      m[line.substr(5, sp - 5)] = line.substr(sp + 1);
    }
  }

  // Stores keys [0, keys), pipelined 500 at a time; returns the sets sent.
  uint64_t preload(Rng& rng) {
    doing_ = "storing the key space";
    const uint64_t batch = 500;
    for (uint64_t k0 = 0; k0 < o_.keys; k0 += batch) {
      uint64_t k1 = std::min<uint64_t>(o_.keys, k0 + batch);
      std::string out;
      for (uint64_t k = k0; k < k1; ++k) append_set(out, k, o_.etc ? etc_value_size(rng) : o_.value_size, o_);
      send_all(out);
      for (uint64_t k = k0; k < k1; ++k) {
        for (;;) {
          ReplyState st;
          size_t consumed = 0;
          Parse p = parse_set(in_.data(), in_.size(), consumed, st, o_);
          if (p == Parse::more) {
            read_more();
            continue;
          }
          if (p == Parse::broken || !st.error.empty()) fail("storing the key space: " + st.error);
          in_.erase(0, consumed);
          break;
        }
      }
    }
    return o_.keys;
  }

 private:
  const Options& o_;
  int fd_;
  std::string in_;
  std::string doing_ = "connecting";
};

uint64_t stat_u64(const std::map<std::string, std::string>& m, const char* name) {
  auto it = m.find(name);
  if (it == m.end()) fail(std::string("the server's stats have no ") + name);
  return std::strtoull(it->second.c_str(), nullptr, 10);
}

std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      r += '\\', r += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      r += ' ';
    else
      r += c;
  }
  return r + "\"";
}

void raise_nofile() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  raise_nofile();
  sockaddr_in addr = resolve(o);
  Control ctl(addr, o);
  auto before = ctl.stats("before the run");
  Rng rng(o.seed);
  uint64_t preload_sets = ctl.preload(rng);

  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < o.threads; ++t) {
    unsigned n = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
    workers.push_back(std::make_unique<Worker>(o, t, n));
    std::string err;
    if (!workers.back()->connect_all(addr, err))
      fail("opening connection(s) to " + o.host + ":" + std::to_string(o.port) + ": " + err);
  }

  std::atomic<int> phase{kWarmup};
  std::vector<std::thread> threads;
  rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);
  for (auto& w : workers) threads.emplace_back([&w, &phase] { w->run(phase); });
  auto sleep_s = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  sleep_s(o.warmup_s);
  uint64_t t0 = now_ns();
  phase.store(kMeasure, std::memory_order_release);
  sleep_s(o.duration_s);
  phase.store(kDrain, std::memory_order_release);
  uint64_t t1 = now_ns();
  // The drain: every sent request must be answered, within drain_timeout_s.
  std::thread stopper([&] {
    uint64_t end = now_ns() + uint64_t(o.drain_timeout_s * 1e9);
    while (phase.load() == kDrain && now_ns() < end) sleep_s(0.01);
    int d = kDrain;
    phase.compare_exchange_strong(d, kStop);
  });
  for (auto& t : threads) t.join();
  phase.store(kStop);
  stopper.join();
  rusage ru1;
  getrusage(RUSAGE_SELF, &ru1);
  auto after = ctl.stats("after the run");

  Counts total, measured;
  uint64_t get_keys_sent = 0, sets_sent = preload_sets, unanswered = 0, broken = 0, late = 0;
  std::vector<uint32_t> lat;
  std::vector<std::string> samples;
  for (auto& w : workers) {
    total.add(w->total);
    measured.add(w->measured);
    get_keys_sent += w->get_keys_sent;
    sets_sent += w->sets_sent;
    unanswered += w->unanswered;
    broken += w->broken_conns;
    late += w->late;
    lat.insert(lat.end(), w->latency.begin(), w->latency.end());
    for (auto& s : w->error_samples)
      if (samples.size() < 5) samples.push_back(s);
  }
  double secs = double(t1 - t0) / 1e9;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) -> double {
    if (lat.empty()) return 0;
    size_t i = std::min(lat.size() - 1, size_t(p / 100.0 * double(lat.size())));
    return lat[i] / 10.0;
  };
  double mean = 0;
  for (uint32_t v : lat) mean += v;
  mean = lat.empty() ? 0 : mean / double(lat.size()) / 10.0;
  double cpu = double(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
               double(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;

  // The server's view.
  uint64_t d_get = stat_u64(after, "cmd_get") - stat_u64(before, "cmd_get");
  uint64_t d_set = stat_u64(after, "cmd_set") - stat_u64(before, "cmd_set");
  uint64_t d_hits = stat_u64(after, "get_hits") - stat_u64(before, "get_hits");
  uint64_t d_misses = stat_u64(after, "get_misses") - stat_u64(before, "get_misses");
  std::vector<std::string> mismatches;
  if (o.validate) {
    auto check = [&](const char* what, uint64_t server, uint64_t ours, const char* ours_what) {
      if (server != ours)
        mismatches.push_back(std::string("server's ") + what + " moved by " + std::to_string(server) + ", mcload " +
                             ours_what + " " + std::to_string(ours));
    };
    check("cmd_get", d_get, get_keys_sent, "asked for keys:");
    check("cmd_set", d_set, sets_sent, "sent sets:");
    check("get_hits", d_hits, total.hits, "saw hits:");
    check("get_misses", d_misses, total.misses, "saw misses:");
  }
  uint64_t requests = measured.gets + measured.sets;
  uint64_t errors = total.errors + unanswered;
  std::printf(
      "{\"tool\":\"mcload\",\"server\":%s,\"server_version\":%s,\"protocol\":\"%s\",\"connections\":%u,"
      "\"threads\":%u,\"depth\":%u,\"write_ratio\":%g,\"keys\":%llu,\"key_size\":%s,\"value_size\":%s,"
      "\"multiget\":%u,\"arrivals\":\"%s\",\"warmup_s\":%g,\"duration_s\":%.3f,\"requests\":%llu,"
      "\"ops_per_s\":%.1f,\"get_keys_per_s\":%.1f,\"gets\":%llu,\"sets\":%llu,\"get_keys\":%llu,\"hits\":%llu,"
      "\"misses\":%llu,\"errors\":%llu,\"unanswered\":%llu,\"broken_connections\":%llu,"
      "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"mean_us\":%.1f,"
      "\"client_cpu_s\":%.3f,\"late_sends\":%llu,\"server_cmd_get\":%llu,\"server_cmd_set\":%llu,"
      "\"server_get_hits\":%llu,\"server_get_misses\":%llu,\"validated\":%s}\n",
      json_str(o.host + ":" + std::to_string(o.port)).c_str(),
      json_str(after.count("version") ? after["version"] : "?").c_str(), o.protocol == Protocol::text ? "text" : "meta",
      o.connections, o.threads, o.depth, o.write_ratio, (unsigned long long)o.keys,
      o.etc ? "\"etc\"" : std::to_string(o.key_size).c_str(), o.etc ? "\"etc\"" : std::to_string(o.value_size).c_str(),
      o.multiget, o.etc_arrivals ? "etc" : "closed", o.warmup_s, secs, (unsigned long long)requests,
      double(requests) / secs, double(measured.get_keys) / secs, (unsigned long long)measured.gets,
      (unsigned long long)measured.sets, (unsigned long long)measured.get_keys, (unsigned long long)measured.hits,
      (unsigned long long)measured.misses, (unsigned long long)errors, (unsigned long long)unanswered,
      (unsigned long long)broken, pct(50), pct(90), pct(99), pct(99.9), mean, cpu, (unsigned long long)late,
      (unsigned long long)d_get, (unsigned long long)d_set, (unsigned long long)d_hits, (unsigned long long)d_misses,
      !o.validate          ? "null"
      : mismatches.empty() ? "true"
                           : "false");
  std::fflush(stdout);
  int rc = 0;
  for (auto& m : mismatches) {
    std::fprintf(stderr, "mcload: validation failed: %s\n", m.c_str());
    rc = 1;
  }
  if (errors) {
    std::fprintf(stderr, "mcload: %llu error(s) (%llu unanswered, %llu connection(s) broken); first:\n",
                 (unsigned long long)errors, (unsigned long long)unanswered, (unsigned long long)broken);
    for (auto& s : samples) std::fprintf(stderr, "  %s\n", s.c_str());
    rc = 1;
  }
  if (requests == 0) {
    std::fprintf(stderr, "mcload: no request completed while measuring\n");
    rc = 1;
  }
  return rc;
}
