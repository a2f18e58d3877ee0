// Tests for issue 5 area prune_unstructured (filled in with the implementation).
#include <gtest/gtest.h>
