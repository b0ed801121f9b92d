// server_pthread.cpp — --runtime=pthread: one kernel thread per connection,
// the same connection code as loom's (connection.hpp) over the system calls.
#include <cstdio>

#include "io_pthread.hpp"
#include "server.hpp"

namespace web {

int run_pthread(const Options& o) {
  std::size_t nofile = setup_process();
  static ServerContext ctx;  // lives as long as the detached threads
  static StaticRoot* root = nullptr;
  if (!o.root.empty()) {
    root = new StaticRoot(o.root);
    if (!root->ok()) {
      std::fprintf(stderr, "webserver: --root %s\n", root->error().c_str());
      return 2;
    }
    ctx.root = root;
  }
  fill_context(ctx, o, nofile);
  static ConnTable table(nofile);
  ctx.table = &table;
  std::string err;
  int l = open_listener<PthreadIo>(o, o.port, false, err);
  if (l < 0) {
    std::fprintf(stderr, "webserver: %s\n", err.c_str());
    return 1;
  }
  static Ticker ticker(&table, tick_for(o.read_timeout));
  print_listening("webserver", o, local_port(l), "runtime=pthread, a kernel thread per connection");
  accept_loop<PthreadIo>(ctx, l);
  return 0;
}

}  // namespace web
