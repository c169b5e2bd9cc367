// HDF5 data sets: two datasets of one file (images, labels) found by name.
// Images stay in the file and are read by hyperslab, a batch at a time,
// through HDF5's chunk cache (any layout, compression or byte order HDF5
// reads); labels are read into memory. HDF5 calls go through one lock:
// Debian's library is built thread-safe, others may not be.
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/arrays.hpp"
#include "data/dataset.hpp"

namespace syncopt::data {
namespace {

// Recursive: a source made under the lock may be destroyed under it.
std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// One HDF5 identifier, closed with its own function.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : m_id(id), m_close(close) {}
  ~Hid() {
    if (m_id >= 0) m_close(m_id);
  }
  Hid(Hid&& o) noexcept : m_id(o.m_id), m_close(o.m_close) { o.m_id = -1; }
  Hid& operator=(Hid&& o) noexcept {
    std::swap(m_id, o.m_id);
    std::swap(m_close, o.m_close);
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return m_id; }
  bool ok() const { return m_id >= 0; }

 private:
  hid_t m_id = -1;
  herr_t (*m_close)(hid_t) = nullptr;
};

// "uint8", "float32", ... for messages.
std::string type_name(hid_t dset) {
  const Hid type(H5Dget_type(dset), H5Tclose);
  const std::string bits = std::to_string(8 * H5Tget_size(type.get()));
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER:
      return (H5Tget_sign(type.get()) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT:
      return "float" + bits;
    default:
      return "a non-numeric type";
  }
}

std::vector<std::int64_t> dims_of(hid_t dset) {
  const Hid space(H5Dget_space(dset), H5Sclose);
  const int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> d(static_cast<std::size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
  return {d.begin(), d.end()};
}

// Every dataset of the file with its shape and type, for the message that
// says a name is not there.
herr_t list_dataset(hid_t group, const char* name, const H5L_info_t* /*info*/, void* out) {
  const Hid d(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
  if (d.ok())
    static_cast<std::vector<std::string>*>(out)->push_back(
        std::string(name) + " " + arrays::dims_text(dims_of(d.get())) + " " + type_name(d.get()));
  return 0;
}

Hid open_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw MissingInputError(path + ": cannot open the HDF5 file (" + std::strerror(err) +
                            "); data.path names the file when data.name = \"hdf5\"");
  }
  if (!S_ISREG(st.st_mode))
    throw MissingInputError(path + ": expected an HDF5 file, found something that is not a " +
                            "regular file (data.path names the file when data.name = \"hdf5\")");
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are ours to report
  const Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // Read-only: no lock, which Lustre and NFS mounts often refuse.
  H5Pset_file_locking(fapl.get(), false, true);
  Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!f.ok())
    throw DataError(path + ": not an HDF5 file HDF5 can open (" + std::to_string(st.st_size) +
                    " bytes)");
  return f;
}

Hid open_dataset(hid_t file, const std::string& path, const std::string& name,
                 const std::string& key) {
  Hid dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  // Room for the chunks a few batches touch (random reads of small images).
  H5Pset_chunk_cache(dapl.get(), 12421, std::size_t{32} << 20, 1.0);
  Hid d(H5Dopen2(file, name.c_str(), dapl.get()), H5Dclose);
  if (d.ok()) return d;
  std::vector<std::string> found;
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, list_dataset, &found);
  std::string has;
  for (const auto& s : found) has += (has.empty() ? "" : ", ") + s;
  throw MissingInputError(path + ": no dataset '" + name + "' (" + key + "); the file holds " +
                          (found.empty() ? std::string("no datasets") : "datasets " + has));
}

class Hdf5Source final : public ImageSource {
 public:
  Hdf5Source(Hid file, Hid dset, std::string where, arrays::Pixel pixel,
             std::vector<std::int64_t> dims)
      : m_file(std::move(file)),
        m_dset(std::move(dset)),
        m_where(std::move(where)),
        m_pixel(pixel),
        m_dims(std::move(dims)) {
    m_size = 1;
    for (std::size_t i = 1; i < m_dims.size(); ++i) m_size *= m_dims[i];
  }
  ~Hdf5Source() override {
    const std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    m_dset = Hid();
    m_file = Hid();
  }
  Hdf5Source(const Hdf5Source&) = delete;
  Hdf5Source& operator=(const Hdf5Source&) = delete;

  void read(std::int64_t first, std::int64_t n, float* out) const override {
    if (n == 0) return;
    std::vector<std::uint8_t> bytes(m_pixel == arrays::Pixel::kU8 ? n * m_size : 0);
    {
      const std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      const Hid space(H5Dget_space(m_dset.get()), H5Sclose);
      std::vector<hsize_t> start(m_dims.size(), 0), count(m_dims.begin(), m_dims.end());
      start[0] = static_cast<hsize_t>(first);
      count[0] = static_cast<hsize_t>(n);
      const hsize_t total = static_cast<hsize_t>(n * m_size);
      const Hid mem(H5Screate_simple(1, &total, nullptr), H5Sclose);
      herr_t rc = H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr);
      if (rc >= 0) {
        rc = m_pixel == arrays::Pixel::kU8 ? H5Dread(m_dset.get(), H5T_NATIVE_UINT8, mem.get(),
                                                     space.get(), H5P_DEFAULT, bytes.data())
                                           : H5Dread(m_dset.get(), H5T_NATIVE_FLOAT, mem.get(),
                                                     space.get(), H5P_DEFAULT, out);
      }
      if (rc < 0)
        throw DataError(m_where + ": HDF5 could not read images " + std::to_string(first) + ".." +
                        std::to_string(first + n - 1) + " (a damaged or truncated file?)");
    }
    if (m_pixel == arrays::Pixel::kU8)
      arrays::u8_to_unit(bytes.data(), n * m_size, out);
    else
      arrays::check_finite(out, n, m_size, first, m_where);
  }
  std::string where() const override { return m_where; }

 private:
  Hid m_file, m_dset;
  std::string m_where;
  arrays::Pixel m_pixel;
  std::vector<std::int64_t> m_dims;
  std::int64_t m_size = 1;
};

std::vector<std::int64_t> read_labels(hid_t file, const std::string& path,
                                      const std::string& name) {
  const Hid d = open_dataset(file, path, name, "the labels");
  const std::string where = path + ": dataset " + name;
  const std::int64_t n = arrays::label_count(dims_of(d.get()), where);
  const Hid type(H5Dget_type(d.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    throw DataError(where + ": wrong type " + type_name(d.get()) + " for labels: expected " +
                    "integers (int8 .. int64, uint8 .. uint64)");
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (n > 0 && H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw DataError(where + ": HDF5 could not read the labels (a damaged or truncated file?)");
  return out;
}

}  // namespace

Dataset read_hdf5(const std::string& file, const std::string& images_name,
                  const std::string& labels_name, std::int64_t limit, int classes) {
  const std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  Hid f = open_file(file);
  Hid images = open_dataset(f.get(), file, images_name, "the images");
  const std::string where = file + ": dataset " + images_name;
  const std::vector<std::int64_t> dims = dims_of(images.get());
  const arrays::ImageShape shape = arrays::image_shape(dims, where);
  const Hid type(H5Dget_type(images.get()), H5Tclose);
  const auto cls = H5Tget_class(type.get());
  const std::size_t size = H5Tget_size(type.get());
  arrays::Pixel pixel;
  if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(type.get()) == H5T_SGN_NONE)
    pixel = arrays::Pixel::kU8;
  else if (cls == H5T_FLOAT && size == 4)
    pixel = arrays::Pixel::kF32;
  else
    throw DataError(where + ": wrong type " + type_name(images.get()) + " for images: expected " +
                    "uint8 (pixels 0..255) or float32; convert with a.astype('float32') (or " +
                    "'uint8') before writing");
  const std::vector<std::int64_t> labels = read_labels(f.get(), file, labels_name);
  auto source = std::make_shared<Hdf5Source>(std::move(f), std::move(images), where, pixel, dims);
  return arrays::make_on_disk("hdf5", shape, std::move(source), labels,
                              file + ": dataset " + labels_name, limit, classes);
}

}  // namespace syncopt::data
