// The process's malloc (see allocator.h). tcmalloc and jemalloc replace malloc by being linked into
// the executable (CMakeLists.txt, luatune_link_allocator); glibc's own is tuned here.
#include "host/core/allocator.h"

#include <dlfcn.h>
#include <malloc.h>

#include <climits>
#include <cstring>

namespace luatune {

namespace {

bool glibc_tuned = false;

}  // namespace

void allocator_init() {
#if defined(LUATUNE_ALLOCATOR_GLIBC_TUNE) && defined(__GLIBC__)
  // Large blocks from the heap (brk), not from mmap: a freed 100 MB logits buffer is then reused by
  // the next step instead of being unmapped and faulted in again. M_MMAP_THRESHOLD alone cannot do
  // it: glibc caps it at 32 MiB, below a step's largest buffers. Threads' arenas still fall back to
  // mmap for blocks larger than their 64 MiB heaps.
  bool ok = mallopt(M_MMAP_MAX, 0) == 1;
  // Never give the heap's free top back to the kernel (the next step needs it again).
  ok = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 && ok;
  glibc_tuned = ok;
#endif
}

std::string allocator_name() {
  // The malloc the dynamic linker resolved for everyone (LibTorch included), and the file defining it.
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (!sym || dladdr(sym, &info) == 0 || !info.dli_fname) return "unknown";
  const char* file = std::strrchr(info.dli_fname, '/');
  std::string name = file ? file + 1 : info.dli_fname;
  if (name.find("tcmalloc") != std::string::npos) return "tcmalloc";
  if (name.find("jemalloc") != std::string::npos) return "jemalloc";
  if (name.rfind("libc.so", 0) == 0)
    return glibc_tuned ? "glibc (tuned: M_MMAP_MAX 0, M_TRIM_THRESHOLD INT_MAX)" : "glibc";
  return name;
}

}  // namespace luatune
