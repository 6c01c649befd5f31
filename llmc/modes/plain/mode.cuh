// mode.cuh (plain module: BF16, FP16 and FP32 storage) - the trainer's hooks: none of them does anything
// (ModeDefaults). FP16's dynamic loss scaling belongs to the storage type, not to a mode: the model does
// it (llmc/model/model.cuh) whenever floatX is half.
#pragma once

#include "llmc/modes/mode_defaults.cuh"

struct Mode : ModeDefaults {};
