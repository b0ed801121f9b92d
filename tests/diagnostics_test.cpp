// Diagnostics that tell the truth (issue 26, item 3): processor threads are
// named for top, ps and gdb; the fibre listing tells ready from blocked.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/io.hpp"
#include "loom/loom.h"
#include "loom/loom.hpp"

namespace {

// The names of the process's kernel threads, from /proc.
std::multiset<std::string> thread_names() {
  std::multiset<std::string> names;
  DIR* d = opendir("/proc/self/task");
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  closedir(d);
  return names;
}

std::string listing(const std::multiset<std::string>& names) {
  std::string s;
  for (auto& n : names) s += "'" + n + "' ";
  return s;
}

TEST(Diagnostics, ProcessorThreadsAreNamed) {
  auto names = thread_names();
  // The default cluster: processor 0 is the main thread, which keeps its name.
  for (std::size_t i = 1; i < loom::Cluster::default_cluster().processors(); ++i)
    EXPECT_EQ(names.count("loom/P" + std::to_string(i)), 1u) << listing(names);
  EXPECT_EQ(names.count("loom/P0"), 0u) << listing(names);

  loom::Cluster c(2);
  names = thread_names();
  std::string prefix = "loom/c" + std::to_string(c.id()) + "/P";
  EXPECT_EQ(names.count(prefix + "0"), 1u) << listing(names);
  EXPECT_EQ(names.count(prefix + "1"), 1u) << listing(names);

  // The offload cluster, made on first use.
  EXPECT_EQ(loom::offload([] { return 7; }), 7);
  names = thread_names();
  EXPECT_EQ(names.count("loom/off0"), 1u) << listing(names);
}

// The listing's line of the fibre named `name` ("" if none).
std::string listing_line(const std::string& name) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  loom::dump_fibres(out);
  std::fclose(out);
  std::string all(buf, len), line;
  std::free(buf);
  auto at = all.find(" " + name + " ");
  if (at != std::string::npos) {
    auto b = all.rfind('\n', at) + 1;
    line = all.substr(b, all.find('\n', at) - b);
  }
  return line;
}

// A fibre woken but not yet run (its only processor is busy with the
// waker) is listed as ready, not as blocked on what woke it.
TEST(Diagnostics, AWokenFibreIsListedReady) {
  loom::Cluster c(1);
  loom::Semaphore sem(0);
  loom::FibreAttr a;
  a.cluster = &c;
  a.name = "sleeper-26";
  loom::Fibre sleeper(a, [&] { sem.acquire(); });
  loom::FibreAttr w;
  w.cluster = &c;
  std::string before, after;
  loom::Fibre waker(w, [&] {
    while (listing_line("sleeper-26").find("blocked") == std::string::npos) loom::this_fibre::yield();
    before = listing_line("sleeper-26");
    sem.release();  // the sleeper is queued on this very processor, behind us
    after = listing_line("sleeper-26");
  });
  waker.join();
  sleeper.join();
  EXPECT_NE(before.find("blocked: semaphore"), std::string::npos) << before;
  EXPECT_NE(after.find("ready"), std::string::npos) << after;
  EXPECT_EQ(after.find("blocked"), std::string::npos) << after;
}

// The listing's cluster column (the fifth field from the end).
std::string cluster_column(const std::string& line) {
  std::vector<std::string> f;
  std::size_t i = 0;
  while ((i = line.find_first_not_of(' ', i)) != std::string::npos) {
    std::size_t e = line.find(' ', i);
    f.push_back(line.substr(i, e == std::string::npos ? std::string::npos : e - i));
    i = e;
  }
  return f.size() >= 5 ? f[f.size() - 5] : "";
}

// A fibre in a call made on the offload cluster is listed blocked in that
// call, on its own cluster: it was "running" on the offload cluster.
TEST(Diagnostics, AnOffloadedCallIsListedBlockedAtHome) {
  // A named FIFO, open for reading and writing, blocking: not a pipe loom
  // can try per call (PIPEFS), so its read is made on the offload cluster.
  char dir[] = "/tmp/loom-diag-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  loom::FibreAttr a;
  a.name = "fifo-reader-26";
  char b = 0;
  loom::Fibre reader(a, [&] { (void)!loom::io::read(fd, &b, 1); });
  loom::FibreAttr g;
  g.name = "function-26";
  std::atomic<bool> go{false};
  loom::Fibre fn(g, [&] {
    loom::offload([&] {
      while (!go.load()) ::usleep(1000);  // the kernel thread of an offload processor waits
      return 0;
    });
  });
  std::string line, fline;
  for (int i = 0; i < 5000; ++i) {
    line = listing_line("fifo-reader-26");
    fline = listing_line("function-26");
    if (line.find("offloaded") != std::string::npos && fline.find("offloaded") != std::string::npos) break;
    loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(line.find("blocked: fd " + std::to_string(fd) + " (read), offloaded"), std::string::npos) << line;
  EXPECT_NE(fline.find("blocked: a function (loom::offload), offloaded"), std::string::npos) << fline;
  std::string home = std::to_string(loom::Cluster::default_cluster().id());
  EXPECT_EQ(cluster_column(line), home) << line;
  EXPECT_EQ(cluster_column(fline), home) << fline;
  ASSERT_EQ(::write(fd, "x", 1), 1);
  go.store(true);
  reader.join();
  fn.join();
  EXPECT_EQ(b, 'x');
  // Back: no longer listed as offloaded.
  loom::Fibre after(a, [] { loom::this_fibre::sleep_for(std::chrono::milliseconds(200)); });
  loom::this_fibre::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(listing_line("fifo-reader-26").find("offloaded,"), std::string::npos);
  after.join();
  ::close(fd);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

// A C thread's name, set with loom_setname_np after it started, is the
// name the fibre listing shows.
TEST(Diagnostics, ACThreadsNameIsListed) {
  static loom_sem_t go;
  loom_sem_init(&go, 0, 0);
  loom_t t;
  ASSERT_EQ(loom_create(&t, nullptr, [](void*) -> void* { loom_sem_wait(&go); return nullptr; }, nullptr), 0);
  ASSERT_EQ(loom_setname_np(t, "c-worker-26"), 0);
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  loom::dump_fibres(out);
  std::fclose(out);
  std::string all(buf, len);
  std::free(buf);
  EXPECT_NE(all.find("c-worker-26"), std::string::npos) << all;
  loom_sem_post(&go);
  ASSERT_EQ(loom_join(t, nullptr), 0);
}

// Runs this test binary's DiagnosticsChild.DISABLED_<child> as a child
// process with `env`, and returns what it printed (stdout and stderr).
std::string run_child(const char* env, const char* child) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "readlink failed";
  self[n] = 0;
  std::string cmd = std::string(env) + " timeout 60 " + self +
                    " --gtest_also_run_disabled_tests --gtest_filter=DiagnosticsChild.DISABLED_" + child + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "popen failed";
  std::string out;
  char buf[4096];
  while (std::size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  int status = pclose(p);
  if (status != 0) out += "\n(child exit status " + std::to_string(status) + ")";
  return out;
}

// The stall report names the system call a processor's thread sits in,
// also one outside loom's I/O list (rt_sigtimedwait was "system call 128").
TEST(Diagnostics, StallReportNamesTheSystemCall) {
  std::string out = run_child("LOOM_PROCESSORS=2 LOOM_STALL_MS=100", "SigtimedwaitOnAFibre");
  EXPECT_EQ(out.find("child exit status"), std::string::npos) << out;
  EXPECT_NE(out.find("in the kernel for"), std::string::npos) << out;
  EXPECT_NE(out.find(": rt_sigtimedwait (sigwait), a call loom's I/O did not see"), std::string::npos) << out;
  EXPECT_EQ(out.find("system call "), std::string::npos) << out;
}

// Every call has its name, from the kernel header's table
// (runtime/sched/syscall_names_x86_64.inc): preadv2 was "system call 327".
TEST(Diagnostics, StallReportNamesACallOutsideTheShortList) {
  std::string out = run_child("LOOM_PROCESSORS=2 LOOM_STALL_MS=100", "Preadv2OnAFibre");
  EXPECT_EQ(out.find("child exit status"), std::string::npos) << out;
  EXPECT_NE(out.find("in the kernel for"), std::string::npos) << out;
  EXPECT_NE(out.find(": preadv2, a call loom's I/O did not see"), std::string::npos) << out;
  EXPECT_EQ(out.find("system call "), std::string::npos) << out;
}

// Run only as a child, by the test above.
TEST(DiagnosticsChild, DISABLED_SigtimedwaitOnAFibre) {
  loom::Fibre([] {
    sigset_t none;
    sigemptyset(&none);
    sigaddset(&none, SIGURG);  // never sent: the wait times out
    timespec ts{0, 600 * 1000 * 1000};
    sigtimedwait(&none, nullptr, &ts);
  }).join();
}

// Run only as a child: the system's preadv2 on a pipe (offset -1: the
// pipe's position), answered 600 ms later by a kernel thread.
TEST(DiagnosticsChild, DISABLED_Preadv2OnAFibre) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    (void)!::write(fds[1], "x", 1);
  });
  char b = 0;
  loom::Fibre([&] {
    iovec v{&b, 1};
    (void)!::syscall(SYS_preadv2, fds[0], &v, 1, -1L, -1L, 0);
  }).join();
  writer.join();
  EXPECT_EQ(b, 'x');
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
