// Tests for issue 5 area prune_importance (filled in with the implementation).
#include <gtest/gtest.h>
