// File readers: MNIST-format IDX (gzip or plain, told apart by content) and
// CIFAR-10 binary batches. Every size read from a file is checked against a
// bound (and, for plain files, against the file size) before anything is
// allocated from it; every problem is one line naming the path.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/dataset.hpp"

namespace syncopt::data {
namespace {

constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dim
constexpr std::uint8_t kIdxTypeUnsignedByte = 0x08;
constexpr std::int64_t kMaxCount = 10'000'000;
constexpr std::int64_t kMaxSide = 1024;
constexpr std::int64_t kMaxPayloadNbytes = std::int64_t{1} << 31;
constexpr std::size_t kReadChunkNbytes = std::size_t{16} << 20;
constexpr int kCifarSide = 32;
constexpr int kCifarChannels = 3;
constexpr std::int64_t kCifarImageNbytes = kCifarChannels * kCifarSide * kCifarSide;  // 3072
constexpr std::int64_t kCifarRecordNbytes = 1 + kCifarImageNbytes;                    // 3073

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex8(std::uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", v);
  return buf;
}

std::uint32_t big_endian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// What to do when a file is missing: the Debian package for the default
// Fashion-MNIST location, the config key otherwise.
std::string missing_hint(const std::string& path) {
  if (path.rfind(kFashionMnistDir, 0) == 0)
    return "install it with `apt-get install dataset-fashion-mnist`";
  return "check data.path in the config";
}

// A readable regular file whose bytes come either straight from disk or
// through zlib, chosen by the gzip magic (1f 8b) of its first two bytes.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what) : m_path(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      throw MissingInputError(path + ": cannot open " + what + " (" + std::strerror(err) + "); " +
                              missing_hint(path));
    }
    if (!S_ISREG(st.st_mode))
      throw MissingInputError(path + ": expected " + what + ", found something that is not a " +
                              "regular file; " + missing_hint(path));
    m_file_nbytes = st.st_size;
    m_file = std::fopen(path.c_str(), "rb");
    if (m_file == nullptr) {
      const int err = errno;
      throw MissingInputError(path + ": cannot read " + what + " (" + std::strerror(err) + "); " +
                              missing_hint(path));
    }
    unsigned char magic[2] = {0, 0};
    const std::size_t got = std::fread(magic, 1, 2, m_file);
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
      std::fclose(m_file);
      m_file = nullptr;
      m_gz = gzopen(path.c_str(), "rb");
      if (m_gz == nullptr)
        throw MissingInputError(path + ": cannot open gzip " + what + "; " + missing_hint(path));
      gzbuffer(m_gz, 1u << 18);  // fewer, larger reads: the default 8 KiB is slow
    } else {
      std::rewind(m_file);
    }
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() {
    if (m_file != nullptr) std::fclose(m_file);
    if (m_gz != nullptr) gzclose(m_gz);
  }

  bool is_gz() const { return m_gz != nullptr; }
  // On-disk size; for gzip files the payload size is only known by reading.
  std::int64_t file_nbytes() const { return m_file_nbytes; }
  const std::string& path() const { return m_path; }

  // Read up to n bytes; fewer only at the end of the data. A corrupt gzip
  // stream is a DataError.
  std::size_t read(void* dst, std::size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const std::size_t want = std::min(n - done, kReadChunkNbytes);
      std::size_t got = 0;
      if (m_gz != nullptr) {
        const int r = gzread(m_gz, out + done, static_cast<unsigned>(want));
        if (r < 0) throw DataError(m_path + ": corrupt gzip stream (" + gz_message() + ")");
        got = static_cast<std::size_t>(r);
      } else {
        got = std::fread(out + done, 1, want, m_file);
        if (got < want && std::ferror(m_file))
          throw MissingInputError(m_path + ": read failed (" + std::strerror(errno) + ")");
      }
      if (got == 0) break;
      done += got;
    }
    return done;
  }

  // After the end of the data: a gzip stream that ended early (no CRC
  // trailer) or broke is a DataError, not silently short data.
  void check_gz_end() {
    if (m_gz == nullptr) return;
    int code = Z_OK;
    const char* msg = gzerror(m_gz, &code);
    if (code != Z_OK)
      throw DataError(m_path + ": truncated or corrupt gzip stream (" +
                      (msg != nullptr ? msg : "unknown zlib error") + ")");
  }

 private:
  std::string gz_message() {
    int code = Z_OK;
    const char* msg = gzerror(m_gz, &code);
    return msg != nullptr ? msg : "unknown zlib error";
  }

  std::string m_path;
  std::FILE* m_file = nullptr;
  gzFile m_gz = nullptr;
  std::int64_t m_file_nbytes = 0;
};

// One IDX file with its header read and checked; payload not yet read.
struct IdxFile {
  InputFile file;
  std::uint32_t magic = 0;
  std::vector<std::int64_t> dims;
  std::int64_t header_nbytes = 0;
  std::int64_t payload_nbytes = 0;

  IdxFile(const std::string& path, std::uint32_t expected_magic, const std::string& what)
      : file(path, what) {
    const int expected_ndims = static_cast<int>(expected_magic & 0xff);
    const std::string expect = "expected " + what + " (IDX magic " + hex32(expected_magic) + ")";
    unsigned char head[4];
    const std::size_t got = file.read(head, 4);
    if (got == 0) {
      file.check_gz_end();
      throw DataError(path + ": empty file: " + expect + ", found 0 bytes" +
                      (file.is_gz() ? " after decompression" : ""));
    }
    if (got < 4)
      throw DataError(path + ": truncated header: " + expect + " (4-byte magic), found only " +
                      std::to_string(got) + " bytes");
    magic = big_endian32(head);
    if (head[0] != 0 || head[1] != 0)
      throw DataError(path + ": bad magic: " + expect + ", found " + hex32(magic) +
                      " (not an IDX file)");
    if (head[2] != kIdxTypeUnsignedByte)
      throw DataError(path + ": wrong IDX type byte: " + expect + " with type " +
                      hex8(kIdxTypeUnsignedByte) + " (unsigned byte), found type " + hex8(head[2]) +
                      " (magic " + hex32(magic) + ")");
    if (head[3] != expected_ndims)
      throw DataError(path + ": wrong number of dimensions: " + expect + " with " +
                      std::to_string(expected_ndims) + " dims, found " + std::to_string(head[3]) +
                      " dims (magic " + hex32(magic) + ")");
    header_nbytes = 4 + 4 * std::int64_t{expected_ndims};
    std::array<unsigned char, 12> dim_bytes{};
    const std::size_t dims_nbytes = 4 * static_cast<std::size_t>(expected_ndims);
    const std::size_t got_dims = file.read(dim_bytes.data(), dims_nbytes);
    if (got_dims < dims_nbytes)
      throw DataError(path + ": truncated header: expected " + std::to_string(header_nbytes) +
                      " header bytes, got " + std::to_string(4 + got_dims));
    for (int d = 0; d < expected_ndims; ++d) dims.push_back(big_endian32(&dim_bytes[4 * d]));

    // Bound every dim before trusting the product.
    if (dims[0] < 1 || dims[0] > kMaxCount)
      throw DataError(path + ": size mismatch: expected an example count in 1.." +
                      std::to_string(kMaxCount) + " in the header, found " +
                      std::to_string(dims[0]));
    payload_nbytes = dims[0];
    for (int d = 1; d < expected_ndims; ++d) {
      if (dims[d] < 1 || dims[d] > kMaxSide)
        throw DataError(path + ": size mismatch: expected image side in 1.." +
                        std::to_string(kMaxSide) + " in the header, found " + dims_text());
      payload_nbytes *= dims[d];
    }
    if (payload_nbytes > kMaxPayloadNbytes)
      throw DataError(path + ": size mismatch: expected at most " +
                      std::to_string(kMaxPayloadNbytes) + " payload bytes, header dims " +
                      dims_text() + " give " + std::to_string(payload_nbytes));
    if (!file.is_gz()) {
      const std::int64_t expected = header_nbytes + payload_nbytes;
      const std::int64_t found = file.file_nbytes();
      if (found < expected)
        throw DataError(path + ": truncated: expected " + std::to_string(expected) + " bytes (" +
                        std::to_string(header_nbytes) + "-byte header + dims " + dims_text() +
                        "), got " + std::to_string(found) + " bytes");
      if (found > expected)
        throw DataError(path + ": size mismatch: header dims " + dims_text() + " expect " +
                        std::to_string(expected) + " bytes, found " + std::to_string(found) +
                        " bytes (" + std::to_string(found - expected) + " trailing bytes)");
    }
  }

  std::string dims_text() const {
    std::string s;
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
    return s;
  }

  // The whole payload. Grows in chunks so that a lying gzip header costs no
  // more memory than the data actually present.
  std::vector<std::uint8_t> read_payload() {
    std::vector<std::uint8_t> out;
    const auto total = static_cast<std::size_t>(payload_nbytes);
    if (!file.is_gz()) out.reserve(total);  // size already checked against the file
    while (out.size() < total) {
      const std::size_t old = out.size();
      const std::size_t want = std::min(total - old, kReadChunkNbytes);
      out.resize(old + want);
      const std::size_t got = file.read(out.data() + old, want);
      out.resize(old + got);
      if (got < want) break;
    }
    if (out.size() < total) {
      file.check_gz_end();
      throw DataError(file.path() + ": truncated: expected " + std::to_string(total) +
                      " payload bytes after the header (dims " + dims_text() + "), got " +
                      std::to_string(out.size()) + (file.is_gz() ? " (decompressed)" : ""));
    }
    unsigned char extra = 0;
    if (file.read(&extra, 1) != 0)
      throw DataError(file.path() + ": size mismatch: header dims " + dims_text() + " expect " +
                      std::to_string(header_nbytes + payload_nbytes) +
                      " bytes, found trailing data after them");
    file.check_gz_end();
    return out;
  }
};

// x / 255 as a table: exact and fast.
const std::array<float, 256>& byte_to_unit() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = static_cast<float>(i) / 255.0f;
    return t;
  }();
  return table;
}

std::int64_t apply_limit(std::int64_t count, std::int64_t limit, const std::string& where) {
  if (limit < 0)
    throw ConfigError(where + ": limit must be >= 0 (0 = all), found " + std::to_string(limit));
  return limit == 0 ? count : std::min(count, limit);
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path, std::int64_t limit,
                 int classes) {
  if (classes < 1 || classes > 256)
    throw ConfigError("read_idx: classes must be in 1..256, found " + std::to_string(classes));
  // Both headers first, so a count mismatch is reported before any payload
  // is read or allocated.
  IdxFile images(images_path, kIdxImagesMagic, "an IDX images file");
  IdxFile labels(labels_path, kIdxLabelsMagic, "an IDX labels file");
  if (images.dims[0] != labels.dims[0])
    throw DataError(images_path + ": image/label count mismatch: expected " +
                    std::to_string(images.dims[0]) + " labels to match its images, found " +
                    std::to_string(labels.dims[0]) + " in " + labels_path);

  const std::vector<std::uint8_t> label_bytes = labels.read_payload();
  for (std::size_t i = 0; i < label_bytes.size(); ++i)
    if (label_bytes[i] >= classes)
      throw DataError(labels_path + ": label out of range at index " + std::to_string(i) +
                      ": expected 0.." + std::to_string(classes - 1) + ", found " +
                      std::to_string(label_bytes[i]));
  const std::vector<std::uint8_t> pixels = images.read_payload();

  Dataset ds;
  ds.name = "idx";
  ds.count = apply_limit(images.dims[0], limit, images_path);
  ds.channels = 1;
  ds.height = static_cast<int>(images.dims[1]);
  ds.width = static_cast<int>(images.dims[2]);
  ds.classes = classes;
  const auto n = static_cast<std::size_t>(ds.count * ds.image_size());
  const auto& unit = byte_to_unit();
  ds.images.resize(n);
  for (std::size_t i = 0; i < n; ++i) ds.images[i] = unit[pixels[i]];
  ds.labels.assign(label_bytes.begin(), label_bytes.begin() + ds.count);
  return ds;
}

Dataset read_cifar10(const std::vector<std::string>& batch_paths, std::int64_t limit) {
  if (batch_paths.empty()) throw ConfigError("read_cifar10: no batch files given");
  const std::int64_t want =
      apply_limit(std::numeric_limits<std::int64_t>::max(), limit, batch_paths.front());
  Dataset ds;
  ds.name = "cifar10";
  ds.channels = kCifarChannels;
  ds.height = kCifarSide;
  ds.width = kCifarSide;
  ds.classes = 10;
  const auto& unit = byte_to_unit();
  std::vector<std::uint8_t> record(kCifarRecordNbytes);
  for (const std::string& path : batch_paths) {
    if (ds.count >= want) break;
    InputFile file(path, "a CIFAR-10 binary batch");
    if (file.is_gz())
      throw DataError(path + ": expected an uncompressed CIFAR-10 binary batch, found gzip data");
    const std::int64_t nbytes = file.file_nbytes();
    if (nbytes == 0)
      throw DataError(path + ": empty file: expected a CIFAR-10 batch of " +
                      std::to_string(kCifarRecordNbytes) + "-byte records, found 0 bytes");
    if (nbytes % kCifarRecordNbytes != 0)
      throw DataError(path + ": size mismatch: expected a multiple of " +
                      std::to_string(kCifarRecordNbytes) +
                      " bytes (1 label + 3072 pixels per record), found " + std::to_string(nbytes) +
                      " bytes (" + std::to_string(nbytes / kCifarRecordNbytes) + " records + " +
                      std::to_string(nbytes % kCifarRecordNbytes) + " bytes)");
    const std::int64_t records = std::min(nbytes / kCifarRecordNbytes, want - ds.count);
    ds.images.reserve(static_cast<std::size_t>((ds.count + records) * kCifarImageNbytes));
    ds.labels.reserve(static_cast<std::size_t>(ds.count + records));
    for (std::int64_t r = 0; r < records; ++r) {
      const std::size_t got = file.read(record.data(), record.size());
      if (got != record.size())
        throw DataError(path + ": truncated: expected " + std::to_string(kCifarRecordNbytes) +
                        " bytes for record " + std::to_string(r) + ", got " + std::to_string(got));
      if (record[0] >= ds.classes)
        throw DataError(path + ": label out of range at record " + std::to_string(r) +
                        ": expected 0..9, found " + std::to_string(record[0]));
      ds.labels.push_back(record[0]);
      // Records are stored channel-major (1024 R, 1024 G, 1024 B): already CHW.
      for (std::int64_t i = 1; i < kCifarRecordNbytes; ++i) ds.images.push_back(unit[record[i]]);
    }
    ds.count += records;
  }
  return ds;
}

}  // namespace syncopt::data
