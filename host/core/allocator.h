// The process's malloc. LibTorch on the CPU frees its large buffers (activations, logits, gradients)
// at the end of every training step and allocates them again in the next; glibc serves blocks over
// its mmap threshold with fresh mmap()s and unmaps them on free, so every step faults in and zeroes
// those pages again. A caching malloc keeps them. LUATUNE_ALLOCATOR picks one at build time
// (docs/building.md#the-allocator); the step times it changes are in docs/benchmarks.md.
#pragma once

#include <string>

namespace luatune {

// With LUATUNE_ALLOCATOR=glibc, tunes glibc's malloc (mallopt: no mmap for large blocks, no trimming
// of the heap's top) so freed buffers stay in the heap for the next step; with any other allocator
// it does nothing. Call first in main(), before large allocations.
void allocator_init();
// Whose malloc this process calls, found at run time: "tcmalloc", "jemalloc", "glibc", "glibc (tuned:
// ...)", or the file name of the library that defines malloc.
std::string allocator_name();

}  // namespace luatune
