#include "loom/config.hpp"

#include "base/options.hpp"

#include <cstdlib>
#include <cstring>

namespace loom {

const char* to_string(QueueKind k) {
  switch (k) {
    case QueueKind::nemesis: return "nemesis";
    case QueueKind::locked: return "locked";
    case QueueKind::shared: return "shared";
  }
  return "?";
}

const char* to_string(Placement p) { return p == Placement::push ? "push" : "share"; }

const char* to_string(PollerKind k) {
  switch (k) {
    case PollerKind::idle: return "idle";
    case PollerKind::fibre: return "fibre";
    case PollerKind::loop: return "loop";
    case PollerKind::loop_sleep: return "loop-sleep";
    case PollerKind::opportunistic: return "opportunistic";
    case PollerKind::opportunistic_timeout: return "opportunistic-timeout";
  }
  return "?";
}

const char* to_string(IoBackend b) { return b == IoBackend::uring ? "uring" : "epoll"; }

const char* to_string(StealFence f) { return f == StealFence::lock ? "lock" : "membarrier"; }

SchedConfig SchedConfig::from_env() {
  using namespace rt;
  SchedConfig c;
  c.queue = static_cast<QueueKind>(env_choice("LOOM_QUEUE", {"nemesis", "locked", "shared"}, int(c.queue)));
  c.placement = static_cast<Placement>(env_choice("LOOM_PLACEMENT", {"push", "share"}, int(c.placement)));
  c.stealing = env_bool("LOOM_STEAL", c.stealing);
  int policy = env_choice("LOOM_STEAL_POLICY", {"longest-busy", "random"}, 0);
  c.steal_policy = policy == 0 ? "longest-busy" : "random";
  c.sticky_threshold = env_size("LOOM_STICKY", c.sticky_threshold, 0, 1 << 20);
  // LOOM_SPIN (a count of looks, default 0) became LOOM_SPIN_US (issue 34):
  // its 0, "sleep at once", is kept; another count is not a time.
  if (const char* old = std::getenv("LOOM_SPIN"); old && !std::getenv("LOOM_SPIN_US")) {
    if (std::strcmp(old, "0") == 0)
      c.spin_us = 0;
    else
      env_complain("LOOM_SPIN", old, "0 (it is LOOM_SPIN_US now, in microseconds)",
                   std::to_string(c.spin_us) + " us");
  }
  c.spin_us = unsigned(env_size("LOOM_SPIN_US", c.spin_us, 0, 1'000'000));
  c.steal_fence = static_cast<StealFence>(env_choice("LOOM_STEAL_FENCE", {"lock", "membarrier"}, int(c.steal_fence)));
  c.stack_size = env_bytes("LOOM_STACK_SIZE", c.stack_size, kStackMin, kStackMax);
  c.poller = static_cast<PollerKind>(
      env_choice("LOOM_POLLER", {"idle", "fibre", "loop", "loop-sleep", "opportunistic", "opportunistic-timeout"}, int(c.poller)));
  c.poller_sleep_us = unsigned(env_size("LOOM_POLLER_SLEEP", c.poller_sleep_us, 0, 10'000'000));
  c.io = static_cast<IoBackend>(env_choice("LOOM_IO", {"epoll", "uring"}, int(c.io)));
  c.lazy_register = env_bool("LOOM_LAZY_REGISTER", c.lazy_register);
  c.yield_before_read = env_bool("LOOM_YIELD_BEFORE_READ", c.yield_before_read);
  c.wait_first = env_bool("LOOM_WAIT_FIRST", c.wait_first);
  c.pin = env_bool("LOOM_PIN", c.pin);
  c.stall_ms = unsigned(env_size("LOOM_STALL_MS", c.stall_ms, 0, 3'600'000));
  c.handoff_us = unsigned(env_size("LOOM_HANDOFF_US", c.handoff_us, 0, 10'000'000));
  // Below 100 µs the monitor's looks cost more than they save (1 µs: 18 %
  // of a CPU, an outside review found).
  if (c.handoff_us && c.handoff_us < 100) {
    env_complain("LOOM_HANDOFF_US", std::getenv("LOOM_HANDOFF_US"), "0 (off) or 100-10000000", "100");
    c.handoff_us = 100;
  }
  c.slice_us = unsigned(env_size("LOOM_SLICE_US", c.slice_us, 1, 10'000'000));
  return c;
}

std::string SchedConfig::describe() const {
  return std::string("queue=") + to_string(queue) + " placement=" + to_string(placement) +
         " steal=" + (stealing ? steal_policy : std::string("off")) + " sticky=" + std::to_string(sticky_threshold) +
         " spin=" + std::to_string(spin_us) + "us stack=" + std::to_string(stack_size / 1024) + "KiB poller=" + to_string(poller) +
         (poller == PollerKind::loop_sleep || poller == PollerKind::opportunistic_timeout
              ? "/" + std::to_string(poller_sleep_us) + "us"
              : std::string()) +
         (io == IoBackend::uring ? " io=uring" : "") + " lazy=" + (lazy_register ? "on" : "off") + " ybr=" + (yield_before_read ? "on" : "off") +
         // Only when on: the default summary stays what scripts and process_test compare against.
         (pin ? " pin=on" : "") + (wait_first ? "" : " wait_first=off") + (steal_fence == StealFence::membarrier ? " fence=membarrier" : "") + (stall_ms ? " stall=" + std::to_string(stall_ms) + "ms" : std::string()) +
         (handoff_us == 1000 ? std::string() : handoff_us ? " handoff=" + std::to_string(handoff_us) + "us" : std::string(" handoff=off")) +
         (slice_us == 100000 ? std::string() : " slice=" + std::to_string(slice_us) + "us");
}

}  // namespace loom
