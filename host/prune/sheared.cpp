// Implementation in progress (issue 5); see sheared.h.
#include "host/prune/sheared.h"
