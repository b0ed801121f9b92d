// runtime/base/options: one parser for every LOOM_* variable, one table of
// them, and README.md's table checked against it (issue 26, item 4).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/options.hpp"
#include "loom/config.hpp"

namespace {

using loom::rt::EnvKind;

struct Env {  // sets a variable for one scope
  const char* name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name); }
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Options, FlagsAcceptEverySpellingInAnyCase) {
  for (const char* on : {"1", "on", "ON", "true", "True", "yes", "YES"}) {
    Env e("LOOM_STEAL", on);
    EXPECT_TRUE(loom::rt::env_bool("LOOM_STEAL", false)) << on;
  }
  for (const char* off : {"0", "off", "Off", "false", "FALSE", "no", "No"}) {
    Env e("LOOM_STEAL", off);
    EXPECT_FALSE(loom::rt::env_bool("LOOM_STEAL", true)) << off;
  }
}

TEST(Options, ChoicesAreCaseInsensitive) {
  Env e("LOOM_QUEUE", "LOCKED");
  EXPECT_EQ(loom::SchedConfig::from_env().queue, loom::QueueKind::locked);
  Env p("LOOM_POLLER", "Loop-Sleep");
  EXPECT_EQ(loom::SchedConfig::from_env().poller, loom::PollerKind::loop_sleep);
}

TEST(Options, SizesTakeBinarySuffixes) {
  std::size_t x = 0;
  struct Case { const char* s; std::size_t v; };
  for (Case c : {Case{"65536", 65536}, Case{"64K", 64 << 10}, Case{"64k", 64 << 10}, Case{"1M", 1 << 20},
                 Case{"2m", 2 << 20}, Case{"1G", std::size_t(1) << 30}, Case{"0", 0}}) {
    EXPECT_TRUE(loom::rt::parse_bytes(c.s, &x)) << c.s;
    EXPECT_EQ(x, c.v) << c.s;
  }
  for (const char* bad : {"", "K", "64KB", "64 K", " 64K", "-1", "+1", "1T", "0x10", "1.5M", "64KiB", "99999999999999999999",
                          "17179869184G"})
    EXPECT_FALSE(loom::rt::parse_bytes(bad, &x)) << bad;

  Env e("LOOM_STACK_SIZE", "128K");
  EXPECT_EQ(loom::SchedConfig::from_env().stack_size, 128u << 10);
}

// Every kind of reader says what is wrong in the same words, once, and keeps the default.
TEST(Options, OneWarningForEveryMalformedValue) {
  struct Case { const char* name; const char* value; std::string line; };
  std::vector<Case> cases = {
      {"LOOM_STEAL", "maybe", "loom: LOOM_STEAL=maybe: expected on or off (1/0, true/false, yes/no); using on\n"},
      {"LOOM_QUEUE", "fast", "loom: LOOM_QUEUE=fast: expected nemesis|locked|shared; using nemesis\n"},
      {"LOOM_STICKY", "lots", "loom: LOOM_STICKY=lots: expected an integer in [0, 1048576]; using 8\n"},
      {"LOOM_STACK_SIZE", "64KB",
       "loom: LOOM_STACK_SIZE=64KB: expected a size in bytes from 16K to 1G (K, M, G: powers of 1024); using 64K\n"},
      {"LOOM_STACK_SIZE", "2G", ""},  // told once per variable
  };
  for (const Case& c : cases) {
    Env e(c.name, c.value);
    testing::internal::CaptureStderr();
    loom::SchedConfig cfg = loom::SchedConfig::from_env();
    EXPECT_EQ(testing::internal::GetCapturedStderr(), c.line) << c.name << "=" << c.value;
    EXPECT_EQ(cfg.stack_size, loom::kStackDefault);
  }
  {
    Env e("LOOM_SIGPIPE", "bogus");
    testing::internal::CaptureStderr();
    EXPECT_EQ(loom::rt::env_choice("LOOM_SIGPIPE", {"ignore", "keep"}, 0), 0);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "loom: LOOM_SIGPIPE=bogus: expected ignore|keep; using ignore\n");
  }
  {
    Env e("LOOM_DUMP_SIGNAL", "SIGKILL");
    testing::internal::CaptureStderr();
    EXPECT_EQ(loom::rt::env_signal("LOOM_DUMP_SIGNAL", "none"), 0);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "loom: LOOM_DUMP_SIGNAL=SIGKILL: expected a signal loom can catch (e.g. SIGUSR2); using none\n");
  }
}

TEST(Options, SignalsByNameInAnyCase) {
  EXPECT_EQ(loom::rt::parse_signal("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(loom::rt::parse_signal("usr1"), SIGUSR1);
  EXPECT_EQ(loom::rt::parse_signal("SIGRTMIN+3"), SIGRTMIN + 3);
  EXPECT_EQ(loom::rt::parse_signal("rtmin+3"), SIGRTMIN + 3);
  EXPECT_EQ(loom::rt::parse_signal("10"), 10);
  EXPECT_EQ(loom::rt::parse_signal("SIGNOPE"), 0);
  EXPECT_EQ(loom::rt::parse_signal("RTMIN+"), 0);
}

// README.md has one table of every variable, the same as the code's. On a
// mismatch the expected table is printed: paste it into the README.
TEST(Options, ReadmeTableIsTheCodesTable) {
  std::size_t n = 0;
  const loom::rt::EnvVar* vars = loom::rt::env_vars(&n);
  std::string expected;
  for (std::size_t i = 0; i < n; ++i) expected += loom::rt::env_readme_row(vars[i]) + "\n";
  std::istringstream readme(read_file(LOOM_SOURCE_DIR "/README.md"));
  std::string actual;
  for (std::string line; std::getline(readme, line);)
    if (line.rfind("| `LOOM_", 0) == 0) actual += line + "\n";
  EXPECT_EQ(actual, expected) << "README.md's table of variables should be:\n" << expected;
}

// Every LOOM_* name the runtime, the C API or the public headers mention is
// in the table, and every row of the table is read somewhere.
TEST(Options, EveryVariableInTheSourcesIsInTheTable) {
  std::set<std::string> used;
  std::regex name("\"(LOOM_[A-Z0-9_]+)\"");
  for (const char* dir : {"runtime", "capi", "include"}) {
    for (auto& f : std::filesystem::recursive_directory_iterator(std::string(LOOM_SOURCE_DIR) + "/" + dir)) {
      if (!f.is_regular_file() || f.path().filename() == "options.cpp") continue;
      std::string text = read_file(f.path());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator(); ++it)
        used.insert((*it)[1]);
    }
  }
  for (const std::string& v : used) EXPECT_NE(loom::rt::env_var(v.c_str()), nullptr) << v << " is read but not in the table";
  std::size_t n = 0;
  const loom::rt::EnvVar* vars = loom::rt::env_vars(&n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_TRUE(used.count(vars[i].name)) << vars[i].name << " is in the table but never read";
}

}  // namespace
