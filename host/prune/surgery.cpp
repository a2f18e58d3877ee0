// Implementation in progress (issue 5); see surgery.h.
#include "host/prune/surgery.h"
