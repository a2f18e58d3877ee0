// Implementation in progress (issue 5); see unstructured.h.
#include "host/prune/unstructured.h"
