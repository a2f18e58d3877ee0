// Tests for issue 5 area prune_sheared (filled in with the implementation).
#include <gtest/gtest.h>
