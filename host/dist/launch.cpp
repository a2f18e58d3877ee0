// Placeholder: filled in by the DDP work (launch.h).
#include "host/dist/launch.h"
