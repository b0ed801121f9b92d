// static_files.cpp — see static_files.hpp.
#include "static_files.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "http_parser.hpp"

namespace web {

namespace {

struct Mime {
  const char* ext;
  const char* type;
};
constexpr Mime kMimes[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"json", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"md", "text/markdown; charset=utf-8"},
    {"xml", "application/xml"},
    {"csv", "text/csv; charset=utf-8"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"svg", "image/svg+xml"},
    {"ico", "image/x-icon"},
    {"avif", "image/avif"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"wasm", "application/wasm"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
    {"wav", "audio/wav"},
};

bool ext_equals(std::string_view ext, const char* lower) {
  std::size_t n = std::strlen(lower);
  if (ext.size() != n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    char c = ext[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

// "/a/b/" relative to the root: refuses ".." segments; drops "." and empty
// ones. Returns false for a traversal attempt.
bool clean_segments(std::string_view decoded, std::string& out) {
  std::size_t i = 0;
  while (i < decoded.size()) {
    std::size_t j = decoded.find('/', i);
    if (j == std::string_view::npos) j = decoded.size();
    std::string_view seg = decoded.substr(i, j - i);
    if (seg == "..") return false;
    if (!seg.empty() && seg != ".") {
      out += '/';
      out.append(seg.data(), seg.size());
    }
    i = j + 1;
  }
  return true;
}

}  // namespace

std::string_view mime_type(std::string_view name) {
  std::size_t slash = name.rfind('/');
  std::size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
    std::string_view ext = name.substr(dot + 1);
    for (const Mime& m : kMimes)
      if (ext_equals(ext, m.ext)) return m.type;
  }
  return "application/octet-stream";
}

StaticRoot::StaticRoot(const std::string& dir) {
  char* real = ::realpath(dir.c_str(), nullptr);
  if (!real) {
    error_ = dir + ": " + std::strerror(errno);
    return;
  }
  struct stat st;
  if (::stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
    error_ = dir + ": not a directory";
    std::free(real);
    return;
  }
  root_ = real;
  std::free(real);
}

StaticRoot::File StaticRoot::open(std::string_view request_path) const {
  File f;
  if (request_path.empty() || request_path[0] != '/' || request_path.size() > PATH_MAX) {
    f.status = 400;
    return f;
  }
  // On the heap: this runs on a fibre's small stack, and realpath needs
  // some of it too.
  std::string decoded(request_path.size(), '\0');
  long n = percent_decode(request_path, decoded.data(), decoded.size());
  if (n < 0) {
    f.status = 400;
    return f;
  }
  std::string rel;
  if (!clean_segments(std::string_view(decoded.data(), static_cast<std::size_t>(n)), rel)) {
    f.status = 403;
    return f;
  }
  std::string candidate = root_ == "/" ? rel : root_ + rel;
  if (candidate.empty()) candidate = "/";
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<char, void (*)(void*)> real(::realpath(candidate.c_str(), nullptr), std::free);
    if (!real) {
      f.status = errno == EACCES ? 403 : 404;
      return f;
    }
    std::string_view r(real.get());
    bool inside = r == root_ || root_ == "/" ||
                  (r.size() > root_.size() && r.compare(0, root_.size(), root_) == 0 && r[root_.size()] == '/');
    if (!inside) {
      f.status = 403;
      return f;
    }
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
    // refused below); regular files ignore the flag.
    int fd = ::open(real.get(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      f.status = errno == EACCES ? 403 : 404;
      return f;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      f.status = 404;
      return f;
    }
    if (S_ISDIR(st.st_mode) && attempt == 0) {
      ::close(fd);
      candidate = std::string(r) + "/index.html";
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      f.status = 403;
      return f;
    }
    f.status = 200;
    f.fd = fd;
    f.size = static_cast<std::uint64_t>(st.st_size);
    f.mime = mime_type(r);
    return f;
  }
  f.status = 403;  // a directory named index.html
  return f;
}

}  // namespace web
