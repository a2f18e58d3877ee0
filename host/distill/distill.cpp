// Implementation in progress (issue 5); see distill.h.
#include "host/distill/distill.h"
