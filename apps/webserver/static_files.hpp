// static_files.hpp — mapping request paths to files under --root, safely.
//
// A request path is percent-decoded, then refused with 403 if any segment
// is ".." (so "%2e%2e" and "%2E." are caught after decoding), then joined to
// the root's real path, resolved with realpath(3) and refused with 403 unless
// the result is the root or below it (a symlink pointing out of the root is
// refused, one pointing inside is followed). A directory serves its
// index.html, or 404 without one (no listings); anything that is not a
// regular file is 403. Malformed escapes and %00 are 400. Every call here may block on the disk: the server runs it
// through its runtime's `blocking` (loom's offload cluster, or in place on a kernel thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace web {

class StaticRoot {
 public:
  // Empty if dir is not a directory (then error() says why).
  explicit StaticRoot(const std::string& dir);
  bool ok() const { return !root_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return root_; }

  struct File {
    int status = 404;  // 200 (fd is open), 400, 403 or 404
    int fd = -1;
    std::uint64_t size = 0;
    std::string_view mime;
  };
  // Opens the file for a request path (the target's path, still encoded).
  File open(std::string_view request_path) const;

 private:
  std::string root_;  // realpath of the root, no trailing slash (except "/")
  std::string error_;
};

// MIME type from the file name's extension; application/octet-stream if
// unknown.
std::string_view mime_type(std::string_view name);

}  // namespace web
