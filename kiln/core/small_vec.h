// SmallVec: a vector with inline storage, so shapes, op inputs and outputs on the eager hot path
// cost no heap allocation.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <utility>

namespace kiln {

template <typename T, size_t N>
class SmallVec {
 public:
  SmallVec() = default;
  SmallVec(std::initializer_list<T> il) { assign_copy(il.begin(), il.size()); }
  template <typename It, typename = decltype(*std::declval<It>())>
  SmallVec(It b, It e) {
    for (; b != e; ++b) push_back(*b);
  }
  explicit SmallVec(size_t n, const T& v = T()) {
    reserve(n);
    for (size_t i = 0; i < n; ++i) new (ptr() + i) T(v);
    size_ = n;
  }
  SmallVec(const SmallVec& o) { assign_copy(o.ptr(), o.size_); }
  SmallVec(SmallVec&& o) noexcept { move_from(std::move(o)); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) {
      clear();
      assign_copy(o.ptr(), o.size_);
    }
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      destroy();
      move_from(std::move(o));
    }
    return *this;
  }
  ~SmallVec() { destroy(); }

  T* data() { return ptr(); }
  const T* data() const { return ptr(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return ptr()[i]; }
  const T& operator[](size_t i) const { return ptr()[i]; }
  T* begin() { return ptr(); }
  T* end() { return ptr() + size_; }
  const T* begin() const { return ptr(); }
  const T* end() const { return ptr() + size_; }
  T& back() { return ptr()[size_ - 1]; }
  const T& back() const { return ptr()[size_ - 1]; }
  T& front() { return ptr()[0]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    T* nb = static_cast<T*>(::operator new(n * sizeof(T)));
    T* ob = ptr();
    for (size_t i = 0; i < size_; ++i) {
      new (nb + i) T(std::move(ob[i]));
      ob[i].~T();
    }
    if (heap_) ::operator delete(heap_);
    heap_ = nb;
    cap_ = n;
  }
  void push_back(const T& v) {
    if (size_ == cap_) {
      T tmp(v);
      reserve(cap_ * 2);
      new (ptr() + size_) T(std::move(tmp));
    } else {
      new (ptr() + size_) T(v);
    }
    ++size_;
  }
  void push_back(T&& v) {
    if (size_ == cap_) reserve(cap_ * 2);
    new (ptr() + size_) T(std::move(v));
    ++size_;
  }
  template <typename... A>
  T& emplace_back(A&&... a) {
    if (size_ == cap_) reserve(cap_ * 2);
    new (ptr() + size_) T(std::forward<A>(a)...);
    return ptr()[size_++];
  }
  void pop_back() { ptr()[--size_].~T(); }
  void resize(size_t n, const T& v = T()) {
    while (size_ > n) pop_back();
    reserve(n);
    while (size_ < n) push_back(v);
  }
  void clear() {
    if constexpr (std::is_trivially_destructible_v<T>)
      size_ = 0;
    else
      while (size_ > 0) pop_back();
  }

 private:
  // Shapes and strides are copied several times per eager op: trivially copyable elements go
  // by one memcpy instead of a capacity check per element.
  void assign_copy(const T* src, size_t n) {
    reserve(n);
    if constexpr (std::is_trivially_copyable_v<T>) {
      T* d = ptr();
      if (n <= 8) {  // shapes: a few elements, not worth a libc call
        for (size_t i = 0; i < n; ++i) {
          d[i] = src[i];
          asm("" ::: "memory");  // keeps GCC from turning the loop back into a memcpy call
        }
      } else {
        std::memcpy(static_cast<void*>(d), src, n * sizeof(T));
      }
    } else {
      for (size_t i = 0; i < n; ++i) new (ptr() + i) T(src[i]);
    }
    size_ = n;
  }
  T* ptr() { return heap_ ? heap_ : reinterpret_cast<T*>(inline_); }
  const T* ptr() const { return heap_ ? heap_ : reinterpret_cast<const T*>(inline_); }
  void destroy() {
    clear();
    if (heap_) ::operator delete(heap_);
    heap_ = nullptr;
    cap_ = N;
  }
  void move_from(SmallVec&& o) {
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.heap_ = nullptr;
      o.size_ = 0;
      o.cap_ = N;
    } else if constexpr (std::is_trivially_copyable_v<T>) {
      std::memcpy(static_cast<void*>(inline_), o.inline_, sizeof(inline_));  // fixed size: inlined
      size_ = o.size_;
      o.size_ = 0;
    } else {
      for (size_t i = 0; i < o.size_; ++i) new (ptr() + i) T(std::move(o.ptr()[i]));
      size_ = o.size_;
      o.clear();
    }
  }
  alignas(T) unsigned char inline_[sizeof(T) * N];
  T* heap_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = N;
};

}  // namespace kiln
