// Tests for issue 5 area prune_surgery (filled in with the implementation).
#include <gtest/gtest.h>
