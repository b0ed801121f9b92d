// server_loom.cpp — --runtime=loom: one fibre per connection on loom
// clusters; the connection code is connection.hpp's, over loom::io.
//
// Clusters: --processors P split into clusters of --cluster-size S (the
// thesis's way to use more cores: several small scheduling domains rather
// than one big one). Each cluster has its own listening socket on the same
// port (SO_REUSEPORT: the kernel spreads connections over them) and its own
// acceptor fibre, in the cluster's background queue: it accepts only when no
// connection of its cluster is ready to run, so established connections are
// served before new ones are admitted. Connection fibres stay in their
// acceptor's cluster.
#include <sched.h>

#include <cstdio>
#include <loom/loom.hpp>
#include <memory>
#include <string>
#include <vector>

#include "io_loom.hpp"
#include "server.hpp"

namespace web {

namespace {

unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  return 1;
}

loom::PollerKind poller_kind(const std::string& name, loom::PollerKind dflt) {
  if (name == "idle") return loom::PollerKind::idle;
  if (name == "fibre") return loom::PollerKind::fibre;
  if (name == "loop") return loom::PollerKind::loop;
  if (name == "loop-sleep") return loom::PollerKind::loop_sleep;
  if (name == "opportunistic") return loom::PollerKind::opportunistic;
  if (name == "opportunistic-timeout") return loom::PollerKind::opportunistic_timeout;
  return dflt;
}

}  // namespace

loom::SchedConfig sched_config(const Options& o) {
  loom::SchedConfig cfg = loom::SchedConfig::from_env();
  cfg.poller = poller_kind(o.poller, cfg.poller);
  cfg.stack_size = o.stack_size;
  return cfg;
}

unsigned processor_count(const Options& o) { return o.processors ? o.processors : usable_cpus(); }

int run_loom(const Options& o) {
  std::size_t nofile = setup_process();
  // Everything here lives for the life of the process (the detached
  // connection fibres use it; main never returns).
  auto* ctx = new ServerContext;
  if (!o.root.empty()) {
    auto* root = new StaticRoot(o.root);
    if (!root->ok()) {
      std::fprintf(stderr, "webserver: --root %s\n", root->error().c_str());
      return 2;
    }
    ctx->root = root;
  }
  fill_context(*ctx, o, nofile);
  ctx->table = new ConnTable(nofile);

  loom::SchedConfig cfg = sched_config(o);
  unsigned processors = processor_count(o);
  unsigned per = o.cluster_size ? std::min(o.cluster_size, processors) : processors;
  unsigned nclusters = (processors + per - 1) / per;

  std::vector<int> listeners;
  unsigned port = o.port;
  for (unsigned i = 0; i < nclusters; ++i) {
    std::string err;
    int l = open_listener<LoomIo>(o, port, nclusters > 1, err);
    if (l < 0) {
      std::fprintf(stderr, "webserver: %s\n", err.c_str());
      return 1;
    }
    if (i == 0) port = local_port(l);  // --port 0: the others join the port the first got
    listeners.push_back(l);
  }

  std::vector<loom::Cluster*> clusters;
  for (unsigned i = 0; i < nclusters; ++i) {
    unsigned n = std::min(per, processors - i * per);
    clusters.push_back(new loom::Cluster(n, cfg));
  }
  new Ticker(ctx->table, tick_for(o.read_timeout));

  std::vector<loom::Fibre> acceptors;
  for (unsigned i = 0; i < nclusters; ++i) {
    loom::FibreAttr a;
    a.cluster = clusters[i];
    a.background = true;
    a.name = "acceptor";
    int l = listeners[i];
    acceptors.emplace_back(a, [ctx, l] { accept_loop<LoomIo>(*ctx, l); });
  }
  print_listening("webserver", o, port,
                  "runtime=loom, processors=" + std::to_string(processors) + ", clusters=" + std::to_string(nclusters) +
                      " (" + std::to_string(per) + " each), " + (ctx->rest ? "resting connections, " : "") +
                      cfg.describe());
  for (auto& f : acceptors) f.join();  // never: the acceptors do not return
  return 0;
}

}  // namespace web
