// Tests for issue 5 area distill (filled in with the implementation).
#include <gtest/gtest.h>
