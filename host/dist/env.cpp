// Placeholder: filled in by the DDP work (env.h).
#include "host/dist/env.h"
