// TensorFlow's s3:// filesystem for stacks without tensorflow-io: a modular filesystem plugin
// (tensorflow/c/experimental/filesystem/filesystem_interface.h, the C API that stays stable across
// TensorFlow releases) whose every operation calls stackenv/s3_filesystem/operations.py in the
// interpreter that loaded it. tensorflow-io's own plugin cannot load into TensorFlow 2.17+: it needs
// C++ symbols (tsl::) that libtensorflow_framework no longer exports. Only the C API is used here.
//
// Every call takes the GIL: TensorFlow calls filesystems from its own threads, and its Python
// bindings release the GIL around them. A binding that does not (the TFLite converter) while its
// threads read s3:// would wait forever, so the GIL is taken on a helper thread and waited for at
// most PIPELINE_S3_GIL_WAIT_S seconds (default 120): then the operation fails with a message that
// says why (also on stderr: TensorFlow may report only what followed, "no matching files"), and the helper, once it gets the GIL, does nothing. Python errors become TF_Status codes
// chosen by operations.status_code, with the exception's text as the message.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tensorflow/c/experimental/filesystem/filesystem_interface.h"
#include "tensorflow/c/tf_status.h"

namespace {

const char* kModule = "stackenv.s3_filesystem.operations";

// The state of one call between the thread TensorFlow called on and the helper that takes the GIL.
struct GilCall {
  enum Stage { kWaiting, kRunning, kDone, kAbandoned };
  std::mutex mutex;
  std::condition_variable changed;
  Stage stage = kWaiting;
};

double GilWaitSeconds() {
  const char* text = getenv("PIPELINE_S3_GIL_WAIT_S");
  double seconds = text != nullptr ? atof(text) : 0.0;
  return seconds > 0 ? seconds : 120.0;
}

// Runs ``work`` holding the GIL; false (status set) when the GIL did not come within the bound.
bool WithGil(TF_Status* status, const std::function<void()>& work) {
  if (PyGILState_Check()) {  // this thread holds it already (a Python thread calling in)
    work();
    return true;
  }
  auto call = std::make_shared<GilCall>();
  std::thread([call, &work]() {
    PyGILState_STATE gil = PyGILState_Ensure();
    {
      std::lock_guard<std::mutex> lock(call->mutex);
      if (call->stage == GilCall::kAbandoned) {  // the caller gave up: its frame (and work) are gone
        PyGILState_Release(gil);
        return;
      }
      call->stage = GilCall::kRunning;
    }
    work();
    PyGILState_Release(gil);
    std::lock_guard<std::mutex> lock(call->mutex);
    call->stage = GilCall::kDone;
    call->changed.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(call->mutex);
  double seconds = GilWaitSeconds();
  bool started = call->changed.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
    return call->stage != GilCall::kWaiting;
  });
  if (!started) {
    call->stage = GilCall::kAbandoned;
    if (status != nullptr) {
      std::string message =
          "s3:// filesystem (stackenv/s3_filesystem): waited " + std::to_string(static_cast<int>(seconds)) +
          " s for Python's GIL, which the thread that called TensorFlow holds: a TensorFlow call that does not "
          "release it (such as the TFLite converter) is reading s3:// on its own threads. Read from a local copy "
          "of the files instead (PIPELINE_S3_GIL_WAIT_S sets this bound).";
      TF_SetStatus(status, TF_DEADLINE_EXCEEDED, message.c_str());
      fprintf(stderr, "error: %s\n", message.c_str());  // TensorFlow may report only its own symptom
    }
    return false;
  }
  call->changed.wait(lock, [&] { return call->stage == GilCall::kDone; });
  return true;
}

PyObject* Operations() {  // a borrowed reference, imported once
  static PyObject* module = nullptr;
  if (module == nullptr) module = PyImport_ImportModule(kModule);
  return module;
}

// Sets ``status`` from the pending Python exception (or OK when ``result`` is not null); returns result.
PyObject* Check(PyObject* result, TF_Status* status) {
  if (result != nullptr) {
    TF_SetStatus(status, TF_OK, "");
    return result;
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  TF_Code code = TF_INTERNAL;
  const char* text = "s3:// filesystem: the operation failed";
  PyObject* message = nullptr;
  PyObject* module = Operations();
  if (module != nullptr && value != nullptr) {
    PyObject* described = PyObject_CallMethod(module, "status_code", "O", value);
    if (described != nullptr) {
      code = static_cast<TF_Code>(PyLong_AsLong(described));
      Py_DECREF(described);
    }
    message = PyObject_Str(value);
    if (message != nullptr) text = PyUnicode_AsUTF8(message);
  } else if (module == nullptr) {
    text = "s3:// filesystem: cannot import stackenv.s3_filesystem.operations";
  }
  PyErr_Clear();
  TF_SetStatus(status, code, text != nullptr ? text : "s3:// filesystem: the operation failed");
  Py_XDECREF(message);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return nullptr;
}

// Calls operations.<name>(args built from format) and sets status; returns a new reference or null.
template <typename... Args>
PyObject* Call(TF_Status* status, const char* name, const char* format, Args... args) {
  PyObject* module = Operations();
  if (module == nullptr) return Check(nullptr, status);
  return Check(PyObject_CallMethod(module, name, format, args...), status);
}

void Discard(PyObject* result) { Py_XDECREF(result); }

char* Copy(const char* text, Py_ssize_t length) {
  char* copy = static_cast<char*>(malloc(length + 1));
  memcpy(copy, text, length);
  copy[length] = '\0';
  return copy;
}

// Random-access files: an operations.Reader.
void ReaderCleanup(TF_RandomAccessFile* file) {
  WithGil(nullptr, [&] { Py_XDECREF(static_cast<PyObject*>(file->plugin_file)); });
}

int64_t ReaderRead(const TF_RandomAccessFile* file, uint64_t offset, size_t n, char* buffer,
                   TF_Status* status) {
  int64_t read = -1;
  WithGil(status, [&] {
    PyObject* reader = static_cast<PyObject*>(file->plugin_file);
    PyObject* data = Check(PyObject_CallMethod(reader, "read", "Kn", static_cast<unsigned long long>(offset),
                                               static_cast<Py_ssize_t>(n)), status);
    if (data == nullptr) return;
    char* bytes;
    Py_ssize_t length;
    if (PyBytes_AsStringAndSize(data, &bytes, &length) != 0) {
      Py_DECREF(data);
      Check(nullptr, status);
      return;
    }
    if (static_cast<size_t>(length) > n) length = static_cast<Py_ssize_t>(n);
    memcpy(buffer, bytes, length);
    Py_DECREF(data);
    if (static_cast<size_t>(length) < n) TF_SetStatus(status, TF_OUT_OF_RANGE, "Read less bytes than requested");
    read = length;
  });
  return read;
}

// Writable files: an operations.Writer (a local spool, uploaded on flush, sync and close). Appends
// collect here and reach Python in large pieces: TFRecordWriter appends every record on its own, and
// each trip to Python costs a thread and the GIL.
struct Writer {
  PyObject* spool;
  std::string pending;
};
constexpr size_t kPendingBytes = 4 << 20;

Writer* WriterOf(const TF_WritableFile* file) { return static_cast<Writer*>(file->plugin_file); }

// Hands what collected to the spool (the GIL held); false with status set when Python failed.
bool HandOver(Writer* writer, TF_Status* status) {
  if (writer->pending.empty()) return true;
  PyObject* done = Check(PyObject_CallMethod(writer->spool, "write", "y#", writer->pending.data(),
                                             static_cast<Py_ssize_t>(writer->pending.size())), status);
  if (done == nullptr) return false;
  Py_DECREF(done);
  writer->pending.clear();
  return true;
}

void WriterCleanup(TF_WritableFile* file) {
  Writer* writer = WriterOf(file);
  WithGil(nullptr, [&] { Py_XDECREF(writer->spool); });
  delete writer;
}

void WriterAppend(const TF_WritableFile* file, const char* buffer, size_t n, TF_Status* status) {
  Writer* writer = WriterOf(file);
  writer->pending.append(buffer, n);
  if (writer->pending.size() < kPendingBytes) {
    TF_SetStatus(status, TF_OK, "");
    return;
  }
  WithGil(status, [&] { HandOver(writer, status); });
}

int64_t WriterTell(const TF_WritableFile* file, TF_Status* status) {
  Writer* writer = WriterOf(file);
  int64_t value = -1;
  WithGil(status, [&] {
    PyObject* position = Check(PyObject_CallMethod(writer->spool, "tell", nullptr), status);
    if (position == nullptr) return;
    value = PyLong_AsLongLong(position) + static_cast<int64_t>(writer->pending.size());
    Py_DECREF(position);
  });
  return value;
}

void WriterMethod(const TF_WritableFile* file, const char* method, TF_Status* status) {
  Writer* writer = WriterOf(file);
  WithGil(status, [&] {
    if (HandOver(writer, status)) Discard(Check(PyObject_CallMethod(writer->spool, method, nullptr), status));
  });
}

void WriterFlush(const TF_WritableFile* file, TF_Status* status) { WriterMethod(file, "flush", status); }
void WriterSync(const TF_WritableFile* file, TF_Status* status) { WriterMethod(file, "flush", status); }
void WriterClose(const TF_WritableFile* file, TF_Status* status) { WriterMethod(file, "close", status); }

// The filesystem.
void Init(TF_Filesystem* filesystem, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void Cleanup(TF_Filesystem* filesystem) {}

void NewReader(const TF_Filesystem*, const char* path, TF_RandomAccessFile* file, TF_Status* status) {
  file->plugin_file = nullptr;
  WithGil(status, [&] { file->plugin_file = Call(status, "Reader", "s", path); });
}

void OpenWriter(const char* path, int append, TF_WritableFile* file, TF_Status* status) {
  PyObject* spool = nullptr;
  WithGil(status, [&] { spool = Call(status, "Writer", "si", path, append); });
  file->plugin_file = spool != nullptr ? new Writer{spool, std::string()} : nullptr;
}

void NewWriter(const TF_Filesystem*, const char* path, TF_WritableFile* file, TF_Status* status) {
  OpenWriter(path, 0, file, status);
}

void NewAppender(const TF_Filesystem*, const char* path, TF_WritableFile* file, TF_Status* status) {
  OpenWriter(path, 1, file, status);
}

void PathOperation(const char* name, const char* path, TF_Status* status) {
  WithGil(status, [&] { Discard(Call(status, name, "s", path)); });
}

void CreateDir(const TF_Filesystem*, const char* path, TF_Status* status) {
  PathOperation("create_dir", path, status);
}
void DeleteFile(const TF_Filesystem*, const char* path, TF_Status* status) {
  PathOperation("delete_file", path, status);
}
void DeleteDir(const TF_Filesystem*, const char* path, TF_Status* status) {
  PathOperation("delete_dir", path, status);
}
void PathExists(const TF_Filesystem*, const char* path, TF_Status* status) {
  PathOperation("path_exists", path, status);
}

void DeleteRecursively(const TF_Filesystem*, const char* path, uint64_t* undeleted_files,
                       uint64_t* undeleted_dirs, TF_Status* status) {
  *undeleted_files = 0;
  *undeleted_dirs = 1;
  WithGil(status, [&] {
    PyObject* result = Call(status, "delete_recursively", "s", path);
    if (result != nullptr) *undeleted_dirs = 0;
    Discard(result);
  });
}

void RenameFile(const TF_Filesystem*, const char* source, const char* target, TF_Status* status) {
  WithGil(status, [&] { Discard(Call(status, "rename", "ss", source, target)); });
}

void CopyFile(const TF_Filesystem*, const char* source, const char* target, TF_Status* status) {
  WithGil(status, [&] { Discard(Call(status, "copy", "ss", source, target)); });
}

void Stat(const TF_Filesystem*, const char* path, TF_FileStatistics* stats, TF_Status* status) {
  WithGil(status, [&] {
    PyObject* result = Call(status, "stat", "s", path);
    if (result == nullptr) return;
    long long length, mtime;
    int directory;
    if (!PyArg_ParseTuple(result, "LLp", &length, &mtime, &directory)) {
      Check(nullptr, status);
    } else {
      stats->length = length;
      stats->mtime_nsec = mtime;
      stats->is_directory = directory != 0;
    }
    Py_DECREF(result);
  });
}

bool IsDirectory(const TF_Filesystem*, const char* path, TF_Status* status) {
  bool directory = false;
  WithGil(status, [&] {
    PyObject* result = Call(status, "is_directory", "s", path);
    directory = result != nullptr;
    Discard(result);
  });
  return directory;
}

int GetChildren(const TF_Filesystem*, const char* path, char*** entries, TF_Status* status) {
  int count = -1;
  WithGil(status, [&] {
    PyObject* result = Call(status, "children", "s", path);
    if (result == nullptr) return;
    Py_ssize_t size = PyList_Size(result);
    *entries = static_cast<char**>(malloc(sizeof(char*) * (size > 0 ? size : 1)));
    for (Py_ssize_t i = 0; i < size; ++i) {
      Py_ssize_t length;
      const char* name = PyUnicode_AsUTF8AndSize(PyList_GetItem(result, i), &length);
      (*entries)[i] = Copy(name != nullptr ? name : "", name != nullptr ? length : 0);
    }
    Py_DECREF(result);
    count = static_cast<int>(size);
  });
  return count;
}

// The whole URI: TensorFlow's default keeps only the path, dropping the bucket.
char* TranslateName(const TF_Filesystem*, const char* uri) { return Copy(uri, strlen(uri)); }

void* Allocate(size_t size) { return calloc(1, size); }
void Free(void* pointer) { free(pointer); }

template <typename T>
T* Table() {
  return static_cast<T*>(Allocate(sizeof(T)));
}

}  // namespace

extern "C" void TF_InitPlugin(TF_FilesystemPluginInfo* info) {
  info->plugin_memory_allocate = Allocate;
  info->plugin_memory_free = Free;
  info->num_schemes = 1;
  info->ops = Table<TF_FilesystemPluginOps>();
  TF_FilesystemPluginOps* ops = info->ops;
  ops->scheme = Copy("s3", 2);
  TF_SetFilesystemVersionMetadata(ops);

  TF_RandomAccessFileOps* reader = Table<TF_RandomAccessFileOps>();
  reader->cleanup = ReaderCleanup;
  reader->read = ReaderRead;
  ops->random_access_file_ops = reader;

  TF_WritableFileOps* writer = Table<TF_WritableFileOps>();
  writer->cleanup = WriterCleanup;
  writer->append = WriterAppend;
  writer->tell = WriterTell;
  writer->flush = WriterFlush;
  writer->sync = WriterSync;
  writer->close = WriterClose;
  ops->writable_file_ops = writer;

  TF_FilesystemOps* filesystem = Table<TF_FilesystemOps>();
  filesystem->init = Init;
  filesystem->cleanup = Cleanup;
  filesystem->new_random_access_file = NewReader;
  filesystem->new_writable_file = NewWriter;
  filesystem->new_appendable_file = NewAppender;
  filesystem->create_dir = CreateDir;
  filesystem->recursively_create_dir = CreateDir;  // no hierarchy in S3: nothing to create on the way
  filesystem->delete_file = DeleteFile;
  filesystem->delete_dir = DeleteDir;
  filesystem->delete_recursively = DeleteRecursively;
  filesystem->rename_file = RenameFile;
  filesystem->copy_file = CopyFile;
  filesystem->path_exists = PathExists;
  filesystem->stat = Stat;
  filesystem->is_directory = IsDirectory;
  filesystem->get_children = GetChildren;
  filesystem->translate_name = TranslateName;
  ops->filesystem_ops = filesystem;
}
