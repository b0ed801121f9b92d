// main.cpp — the web server (issue 6): HTTP/1.1, one fibre per connection
// (or one kernel thread, --runtime=pthread), plaintext routes and static
// files. `webserver --help` lists the options.
#include "options.hpp"
#include "server.hpp"

int main(int argc, char** argv) {
  web::Options o;
  int rc = web::parse_options(argc, argv, o);
  if (rc >= 0) return rc;
  return o.runtime == web::Options::Runtime::pthread ? web::run_pthread(o) : web::run_loom(o);
}
