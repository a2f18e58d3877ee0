// The W&B sink against a loopback server speaking the protocol's server side (being written).
#include <gtest/gtest.h>
