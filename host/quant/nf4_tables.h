// The literals of bitsandbytes' 4-bit formats (bitsandbytes @ 95f9af30: functional.py
// get_4bit_type, csrc/kernels.cu dQuantizeNF4 / dQuantizeFP4; docs/qlora.md, "Sources"),
// in one place for the CPU reference (nf4.cpp), the CUDA kernels (kernels/nf4_cuda.cu) and their
// tests: the same characters compile to the same floats on both sides. Plain macros, so that a
// __constant__ table in a .cu file and a const array in C++ take them alike.
#pragma once

// Code values, index = 4-bit code.
#define LUATUNE_NF4_CODE                                                                              \
  -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,    \
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, \
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,          \
      0.7229568362236023f, 1.0f
// E2M1 values divided by their largest magnitude (12); bit 3 is the sign (code 8 is -0).
#define LUATUNE_FP4_CODE                                                                                  \
  0.0f / 12, 0.0625f / 12, 8.0f / 12, 12.0f / 12, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12, -0.0f / 12, \
      -0.0625f / 12, -8.0f / 12, -12.0f / 12, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12

// The NF4 decision tree's thresholds, ascending: code k is chosen when x exceeds exactly the
// first k of them (comparisons are x > t).
#define LUATUNE_NF4_THRESHOLDS                                                                    \
  -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,        \
      -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f, \
      0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,         \
      0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f
// The FP4 tree's thresholds on |x|, ascending; they separate the magnitude codes 0, 1, 6, 7, 4, 5,
// 2, 3 (values 0, 1/192, 1/6, 1/4, 1/3, 1/2, 2/3, 1).
#define LUATUNE_FP4_THRESHOLDS \
  0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f, 0.4166667f, 0.583333f, 0.8333333f
