// The binary's global operator new: like the standard one (malloc, the
// new-handler, then an exception), but the exception is syncopt::OutOfMemory,
// which says how many bytes were asked for. main() reports it as out of
// memory with that size (exit 71), never as a bare std::bad_alloc.
// Every form of new and delete is replaced, so that each pair matches.
// Under AddressSanitizer (SYNCOPT_SANITIZE) its own allocator stays.
#include <cstdlib>
#include <new>

#include "common/error.hpp"

#if !defined(__SANITIZE_ADDRESS__)

namespace {

void* allocate(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
      p = std::malloc(n);
    } else {
      // aligned_alloc wants a multiple of the alignment.
      const std::size_t rounded = (n + align - 1) / align * align;
      p = rounded >= n ? std::aligned_alloc(align, rounded) : nullptr;
    }
    if (p != nullptr) return p;
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw syncopt::OutOfMemory(n);
    handler();
  }
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n, 0); }
void* operator new[](std::size_t n) { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

#endif  // !__SANITIZE_ADDRESS__
