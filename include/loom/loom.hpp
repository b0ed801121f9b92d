// loom/loom.hpp — everything of loom's C++ API.
#pragma once

#include "loom/channel.hpp"
#include "loom/cluster.hpp"
#include "loom/color.hpp"
#include "loom/config.hpp"
#include "loom/fibre.hpp"
#include "loom/future.hpp"
#include "loom/io.hpp"
#include "loom/stage.hpp"
#include "loom/sync.hpp"
#include "loom/task_group.hpp"
