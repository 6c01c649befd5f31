// mode.cuh - the trainer's hooks of this build's mode module: struct Mode of llmc/modes/<LLMC_MODE>/mode.cuh,
// the folder llmc/core/mode_rules.h selects from the compile flags (llmc/modes/README.md).
#pragma once

#include "llmc/core/precision.h"
#include LLMC_MODE_FILE(mode.cuh)
