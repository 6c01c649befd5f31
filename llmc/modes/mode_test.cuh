// mode_test.cuh - test_gpt2cu's hooks of this build's mode module: struct ModeTest of
// llmc/modes/<LLMC_MODE>/test.cuh, the folder llmc/core/mode_rules.h selects (llmc/modes/README.md).
#pragma once

#include "llmc/core/precision.h"
#include LLMC_MODE_FILE(test.cuh)
