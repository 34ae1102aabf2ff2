// The sampler is part of the public API (include/moeflow/sampler.h).
#pragma once
#include "moeflow/sampler.h"
