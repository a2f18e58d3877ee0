// Implementation in progress (issue 5); see importance.h.
#include "host/prune/importance.h"
