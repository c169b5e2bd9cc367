// NumPy .npy arrays (format versions 1.0, 2.0, 3.0): the header is parsed
// strictly (a Python dict literal with descr, fortran_order and shape), the
// data memory-mapped; images stay mapped, labels are read into memory and
// the map dropped. Every size is checked against the file before use.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/arrays.hpp"
#include "data/dataset.hpp"

namespace syncopt::data {
namespace {

// A whole file mapped read-only (shared: ranks on one node share the pages).
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& what) : m_path(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw MissingInputError(path + ": cannot open " + what + " (" + std::strerror(err) +
                              "); check data.path and the data.*_images/labels names");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw MissingInputError(path + ": expected " + what + ", found something that is not a " +
                              "regular file");
    }
    m_size = st.st_size;
    if (m_size > 0) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(m_size), PROT_READ, MAP_SHARED, fd, 0);
      const int err = errno;
      ::close(fd);
      if (p == MAP_FAILED)
        throw MissingInputError(path + ": cannot map " + what + " (" + std::strerror(err) + ")");
      m_addr = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (m_addr != nullptr) ::munmap(const_cast<unsigned char*>(m_addr), m_size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return m_addr; }
  std::int64_t size() const { return m_size; }
  const std::string& path() const { return m_path; }

  // Gives back the pages of [offset, offset + nbytes) (whole pages inside).
  void release(std::int64_t offset, std::int64_t nbytes) const {
    const std::int64_t page = ::sysconf(_SC_PAGESIZE);
    const std::int64_t begin = (offset + page - 1) / page * page;
    const std::int64_t end = std::min(m_size, offset + nbytes) / page * page;
    if (m_addr != nullptr && end > begin)
      ::madvise(const_cast<unsigned char*>(m_addr) + begin, static_cast<std::size_t>(end - begin),
                MADV_DONTNEED);
  }

 private:
  std::string m_path;
  const unsigned char* m_addr = nullptr;
  std::int64_t m_size = 0;
};

// The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct NpyHeader {
  char order = '|';  // '<', '>', '|' (not applicable), '=' (native)
  char kind = '?';   // 'u', 'i', 'f', ...
  int itemsize = 0;
  std::string descr;
  bool fortran = false;
  std::vector<std::int64_t> shape;
  std::int64_t data_offset = 0;
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// A small parser for the one dict literal numpy writes; anything else in it
// (a structured dtype's list, an unknown key) is an error.
class DictParser {
 public:
  DictParser(std::string text, std::string path) : m_s(std::move(text)), m_path(std::move(path)) {}

  NpyHeader parse() {
    NpyHeader h;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (peek('[')) fail("a structured dtype (descr is a list); expected uint8 or float32");
        h.descr = string_literal();
        has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = boolean();
        has_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        has_shape = true;
      } else {
        fail("unknown key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    if (!has_descr || !has_order || !has_shape)
      fail("expected the keys descr, fortran_order and shape");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(m_path + ": bad .npy header: " + what + " (header: " + m_s + ")");
  }
  void skip_space() {
    while (m_i < m_s.size() && std::isspace(static_cast<unsigned char>(m_s[m_i]))) ++m_i;
  }
  bool peek(char c) {
    skip_space();
    return m_i < m_s.size() && m_s[m_i] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "' at character " + std::to_string(m_i));
    ++m_i;
  }
  std::string string_literal() {
    skip_space();
    if (m_i >= m_s.size() || (m_s[m_i] != '\'' && m_s[m_i] != '"'))
      fail("expected a quoted string at character " + std::to_string(m_i));
    const char q = m_s[m_i++];
    const std::size_t end = m_s.find(q, m_i);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = m_s.substr(m_i, end - m_i);
    m_i = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (m_s.compare(m_i, std::strlen(word), word) == 0) {
        m_i += std::strlen(word);
        return value;
      }
    }
    fail("expected True or False at character " + std::to_string(m_i));
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> out;
    expect('(');
    while (!peek(')')) {
      skip_space();
      std::int64_t v = 0;
      std::size_t digits = 0;
      while (m_i < m_s.size() && std::isdigit(static_cast<unsigned char>(m_s[m_i]))) {
        if (v > (std::int64_t{1} << 50)) fail("a dimension too large");
        v = v * 10 + (m_s[m_i++] - '0');
        ++digits;
      }
      if (digits == 0) fail("expected a dimension at character " + std::to_string(m_i));
      out.push_back(v);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return out;
  }

  std::string m_s, m_path;
  std::size_t m_i = 0;
};

// Magic, version, header; the element type split out of descr; the data's
// size checked against the file's.
NpyHeader read_header(const MappedFile& f) {
  const std::string& path = f.path();
  constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (f.size() < 10 || std::memcmp(f.data(), kMagic, 6) != 0)
    throw DataError(path + ": not a NumPy .npy file (no \\x93NUMPY magic in its first bytes, " +
                    std::to_string(f.size()) + " bytes); write it with numpy.save");
  const int major = f.data()[6];
  if (major < 1 || major > 3)
    throw DataError(path + ": unsupported .npy format version " + std::to_string(major) + "." +
                    std::to_string(f.data()[7]) + ": expected 1.0, 2.0 or 3.0");
  const std::int64_t prefix = major == 1 ? 10 : 12;
  if (f.size() < prefix) throw DataError(path + ": truncated .npy header");
  const unsigned char* p = f.data() + 8;
  const std::int64_t header_nbytes = major == 1
                                         ? (std::int64_t{p[0]} | std::int64_t{p[1]} << 8)
                                         : (std::int64_t{p[0]} | std::int64_t{p[1]} << 8 |
                                            std::int64_t{p[2]} << 16 | std::int64_t{p[3]} << 24);
  if (prefix + header_nbytes > f.size())
    throw DataError(path + ": truncated .npy header: expected " + std::to_string(header_nbytes) +
                    " header bytes, the file has " + std::to_string(f.size() - prefix));
  const std::string text(reinterpret_cast<const char*>(f.data() + prefix),
                         static_cast<std::size_t>(header_nbytes));
  NpyHeader h = DictParser(text, path).parse();
  h.data_offset = prefix + header_nbytes;
  const std::string& d = h.descr;
  if (d.size() < 3 || std::string("<>|=").find(d[0]) == std::string::npos ||
      !std::isdigit(static_cast<unsigned char>(d[2])))
    throw DataError(path + ": unsupported dtype '" + d + "': expected uint8 or float32 images, " +
                    "integer labels");
  h.order = d[0];
  h.kind = d[1];
  h.itemsize = std::atoi(d.c_str() + 2);
  return h;
}

// The data must fill the file exactly: no more, no less.
void check_size(const MappedFile& f, const NpyHeader& h) {
  const std::int64_t want = h.data_offset + h.elements() * h.itemsize;
  if (f.size() < want)
    throw DataError(f.path() + ": truncated: shape " + arrays::dims_text(h.shape) + " of '" +
                    h.descr + "' needs " + std::to_string(want) + " bytes, the file has " +
                    std::to_string(f.size()));
  if (f.size() > want)
    throw DataError(f.path() + ": size mismatch: shape " + arrays::dims_text(h.shape) + " of '" +
                    h.descr + "' needs " + std::to_string(want) + " bytes, the file has " +
                    std::to_string(f.size()) + " (" + std::to_string(f.size() - want) +
                    " trailing bytes)");
}

void check_c_order(const MappedFile& f, const NpyHeader& h) {
  if (h.fortran)
    throw DataError(f.path() + ": Fortran-ordered array: expected C order; save " +
                    "numpy.ascontiguousarray(a) instead");
}

class NpySource final : public ImageSource {
 public:
  NpySource(std::unique_ptr<MappedFile> file, std::int64_t offset, arrays::Pixel pixel,
            std::int64_t image_size)
      : m_file(std::move(file)), m_offset(offset), m_pixel(pixel), m_size(image_size) {}

  void read(std::int64_t first, std::int64_t n, float* out) const override {
    const unsigned char* base = m_file->data() + m_offset;
    if (m_pixel == arrays::Pixel::kU8) {
      arrays::u8_to_unit(base + first * m_size, n * m_size, out);
      return;
    }
    std::memcpy(out, base + first * m_size * 4, static_cast<std::size_t>(n * m_size * 4));
    arrays::check_finite(out, n, m_size, first, m_file->path());
  }
  void release(std::int64_t first, std::int64_t n) const override {
    const std::int64_t item = m_pixel == arrays::Pixel::kU8 ? 1 : 4;
    m_file->release(m_offset + first * m_size * item, n * m_size * item);
  }
  std::string where() const override { return m_file->path(); }

 private:
  std::unique_ptr<MappedFile> m_file;
  std::int64_t m_offset;
  arrays::Pixel m_pixel;
  std::int64_t m_size;
};

// Every label as int64, whatever the integer type and byte order.
std::vector<std::int64_t> read_labels(const std::string& path) {
  const MappedFile f(path, "a .npy labels file");
  const NpyHeader h = read_header(f);
  const std::int64_t n = arrays::label_count(h.shape, path);
  const bool integer = (h.kind == 'i' || h.kind == 'u') &&
                       (h.itemsize == 1 || h.itemsize == 2 || h.itemsize == 4 || h.itemsize == 8);
  if (!integer)
    throw DataError(path + ": wrong dtype '" + h.descr + "' for labels: expected integers " +
                    "(int8 .. int64, uint8 .. uint64); convert with a.astype('int64')");
  check_c_order(f, h);
  check_size(f, h);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  const unsigned char* p = f.data() + h.data_offset;
  for (std::int64_t i = 0; i < n; ++i, p += h.itemsize) {
    std::uint64_t u = 0;
    for (int b = 0; b < h.itemsize; ++b) {  // little-endian unless '>'
      const int src = h.order == '>' ? h.itemsize - 1 - b : b;
      u |= std::uint64_t{p[src]} << (8 * b);
    }
    std::int64_t v;
    if (h.kind == 'i' && h.itemsize < 8 && (u >> (8 * h.itemsize - 1)) != 0)
      v = static_cast<std::int64_t>(u | (~std::uint64_t{0} << (8 * h.itemsize)));  // sign-extend
    else if (h.kind == 'u' && h.itemsize == 8 && u > static_cast<std::uint64_t>(INT64_MAX))
      v = -1;  // reported as out of range
    else
      v = static_cast<std::int64_t>(u);
    out[static_cast<std::size_t>(i)] = v;
  }
  return out;
}

}  // namespace

Dataset read_npy(const std::string& images_path, const std::string& labels_path, std::int64_t limit,
                 int classes) {
  auto file = std::make_unique<MappedFile>(images_path, "a .npy images file");
  const NpyHeader h = read_header(*file);
  const arrays::ImageShape shape = arrays::image_shape(h.shape, images_path);
  arrays::Pixel pixel;
  if (h.kind == 'u' && h.itemsize == 1)
    pixel = arrays::Pixel::kU8;
  else if (h.kind == 'f' && h.itemsize == 4 && (h.order == '<' || h.order == '='))
    pixel = arrays::Pixel::kF32;
  else
    throw DataError(images_path + ": wrong dtype '" + h.descr + "' for images: expected uint8 " +
                    "('|u1', pixels 0..255) or little-endian float32 ('<f4'); convert with " +
                    "a.astype('float32') (or 'uint8')");
  check_c_order(*file, h);
  check_size(*file, h);
  const std::vector<std::int64_t> labels = read_labels(labels_path);
  auto source =
      std::make_shared<NpySource>(std::move(file), h.data_offset, pixel, shape.image_size());
  return arrays::make_on_disk("npy", shape, std::move(source), labels, labels_path, limit, classes);
}

}  // namespace syncopt::data
