#include "engine/model/internal/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/model/internal/absl_view.h"

namespace kvcast {

using model_internal::AV;
namespace model_internal {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

absl::Status ErrnoToStatus(int error_number, std::string_view message) {
  const std::string text = absl::StrCat(AV(message), ": ", strerror(error_number));
  switch (error_number) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) return ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) contents.append(buffer, n);
  if (std::ferror(file.get())) return ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  return contents;
}

absl::Status WriteFile(const std::string& path, std::string_view contents) {
  const std::string temp = path + ".tmp";
  {
    FilePtr file(std::fopen(temp.c_str(), "wb"));
    if (!file) return ErrnoToStatus(errno, absl::StrCat("cannot create ", temp));
    if (std::fwrite(contents.data(), 1, contents.size(), file.get()) != contents.size() ||
        std::fflush(file.get()) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("cannot write ", temp));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot rename ", temp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<MappedFile> MapFile(const std::string& path, size_t min_size,
                                   std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, absl::StrCat("cannot stat ", path));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < min_size) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": file is ", size, " bytes, too short for ",
                                            AV(what)));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // The mapping keeps the file alive.
  if (mapping == MAP_FAILED) {
    return ErrnoToStatus(mmap_errno, absl::StrCat("cannot mmap ", path));
  }
  return MappedFile{mapping, size};
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::Status MakeDirectories(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("cannot create directory ", prefix));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(AV(dir), AV(name));
  return absl::StrCat(AV(dir), "/", AV(name));
}

}  // namespace model_internal
}  // namespace kvcast
