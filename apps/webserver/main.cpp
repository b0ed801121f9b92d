// main.cpp — the web server (issue 6): HTTP/1.1, one fibre per connection
// (or one kernel thread, --runtime=pthread, or colored events,
// --runtime=events), plaintext routes and static files. `webserver --help`
// lists the options.
#include "options.hpp"
#include "server.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  web::Options o;
  int rc = web::parse_options(argc, argv, o);
  if (rc >= 0) return rc;
#ifdef WEB_PTHREAD_ONLY
  // webserver-pthread: the same server with no loom in it at all, for
  // running unmodified under LD_PRELOAD=libloom-pthread.so (issue 11).
  if (o.runtime != web::Options::Runtime::pthread) {
    std::fprintf(stderr, "%s: built without loom: --runtime=pthread only\n", argv[0]);
    return 2;
  }
  return web::run_pthread(o);
#else
  switch (o.runtime) {
    case web::Options::Runtime::pthread:
      return web::run_pthread(o);
    case web::Options::Runtime::events:
      return web::run_events(o);
    default:
      return web::run_loom(o);
  }
#endif
}
