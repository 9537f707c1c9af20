#include "engine/atomic_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "engine/error.h"

namespace hg {

namespace {

[[noreturn]] void io_fail(const std::string& what, const std::filesystem::path& p, int err) {
  throw IoError(what + " " + p.string() + ": " + std::strerror(err));
}

void write_all(int fd, ByteSpan bytes, const std::filesystem::path& p) {
  const uint8_t* data = bytes.data();
  size_t size = bytes.size();
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_fail("cannot write", p, errno);
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::vector<ByteSpan>& parts, Durability durability) {
  const bool sync = durability == Durability::Synced;
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  std::string tmp = (dir / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) io_fail("cannot create a temporary file for", path, errno);
  try {
    for (ByteSpan part : parts) write_all(fd, part, tmp);
    if (::fchmod(fd, 0644) != 0) io_fail("cannot chmod", tmp, errno);
    if (sync && ::fsync(fd) != 0) io_fail("cannot fsync", tmp, errno);
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) io_fail("cannot close", tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) io_fail("cannot rename " + tmp + " to", path, errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (!sync) return;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_fail("cannot open", path, errno);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) io_fail("cannot stat", path, ec.value());
  std::vector<uint8_t> data(size);
  if (size && !in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(size)))
    io_fail("cannot read", path, EIO);
  return data;
}

MappedFile::~MappedFile() {
  if (size_) ::munmap(data_, size_);
}

std::shared_ptr<const MappedFile> map_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_fail("cannot stat", path, err);
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      io_fail("cannot map", path, err);
    }
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(new MappedFile(data, size));
}

}  // namespace hg
