// The sweep engine: search spaces, trial bookkeeping, resume, reports (being written).
#include <gtest/gtest.h>
