#include "model/TorchSaveFile.h"

#include "common/FileLimits.h"
#include "files/PickleShape.h"
#include "model/TorchError.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace hookscope {

namespace {

namespace fs = std::filesystem;

// The bytes each storage record really holds, by the address LibTorch keeps its data at: a
// storage's own size is the pickle's claim (numel times the element size), which a crafted file
// makes larger than its record.
using RecordSizes = std::map<const void*, std::size_t>;

c10::IValue loadZip(const std::string& path, std::uint64_t fileBytes, RecordSizes* recordSizes) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::uint64_t inflated = 0;
  for (const auto& name : reader.getAllRecords()) inflated += reader.getRecordSize(name);
  if (std::string problem = checkInflatedSize(path, fileBytes, inflated); !problem.empty()) {
    throw std::runtime_error(problem);
  }
  if (!reader.hasRecord("data.pkl")) throw std::runtime_error("the archive holds no data.pkl");
  at::DataPtr data;
  std::size_t size = 0;
  std::tie(data, size) = reader.getRecord("data.pkl");
  const char* pickle = static_cast<const char*>(data.get());
  // Before anything is built: a value nested 200,000 deep, or holding itself, would overflow
  // the stack of whatever walks or frees it later.
  if (std::string problem = checkPickleShape(pickle, size); !problem.empty()) throw std::runtime_error(problem);
  std::size_t offset = 0;
  auto read = [&](char* buffer, std::size_t length) -> std::size_t {
    const std::size_t n = std::min(length, size - offset);
    std::memcpy(buffer, pickle + offset, n);
    offset += n;
    return n;
  };
  auto readRecord = [&](const std::string& name) {
    auto [record, bytes] = reader.getRecord("data/" + name);
    (*recordSizes)[record.get()] = bytes;
    return std::move(record);
  };
  torch::jit::Unpickler unpickler(read, nullptr, nullptr, readRecord, c10::Device(c10::kCPU));
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

// "" when the tensor's sizes, strides and offset stay inside its storage, and the storage
// inside the record it was read from (when `recordSizes` knows it).
std::string checkTensor(const at::Tensor& t, const RecordSizes* recordSizes) {
  if (!t.defined()) return "";
  if (t.layout() != at::kStrided) return "a tensor has a layout other than strided (sparse or similar)";
  if (!t.has_storage()) return "a tensor has no storage";
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  if (t.storage_offset() < 0) return "a tensor has a negative storage offset";
  unsigned __int128 last = std::uint64_t(t.storage_offset());
  bool empty = false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) return "a tensor has a negative size";
    if (strides[d] < 0) return "a tensor has a negative stride";
    if (sizes[d] == 0) empty = true;
    last += (unsigned __int128)(std::uint64_t(std::max<std::int64_t>(sizes[d], 1) - 1)) * std::uint64_t(strides[d]);
  }
  if (recordSizes) {
    const auto record = recordSizes->find(t.storage().data());
    if (record != recordSizes->end() && t.storage().nbytes() > record->second) {
      return "a tensor's storage claims " + std::to_string(t.storage().nbytes()) + " bytes, but its record in the file holds " +
             std::to_string(record->second) + ": the file is damaged or was altered";
    }
  }
  if (empty) return "";
  const unsigned __int128 needed = (last + 1) * t.element_size();
  if (needed > t.storage().nbytes()) {
    return "a tensor of shape " + c10::str(sizes) + " needs more bytes than its storage holds (" +
           std::to_string(t.storage().nbytes()) + "): the file is damaged or was altered";
  }
  return "";
}

} // namespace

namespace {

std::string checkTensorsInside(const c10::IValue& value, const RecordSizes* recordSizes) {
  // Iterative, so a deeply nested value cannot overflow the stack here.
  std::vector<const c10::IValue*> pending{&value};
  while (!pending.empty()) {
    const c10::IValue* v = pending.back();
    pending.pop_back();
    if (v->isTensor()) {
      if (std::string problem = checkTensor(v->toTensor(), recordSizes); !problem.empty()) return problem;
    } else if (v->isTuple()) {
      for (const auto& e : v->toTupleRef().elements()) pending.push_back(&e);
    } else if (v->isList()) {
      for (const auto& e : v->toListRef()) pending.push_back(&e);
    } else if (v->isGenericDict()) {
      for (const auto& entry : v->toGenericDict()) {
        pending.push_back(&entry.key());
        pending.push_back(&entry.value());
      }
    }
  }
  return "";
}

} // namespace

std::string checkTensorsInside(const c10::IValue& value) { return checkTensorsInside(value, nullptr); }

c10::IValue loadTorchSaveFile(const std::string& path) {
  std::error_code ec;
  if (std::string problem = checkRegularFile(path, path); !problem.empty()) throw std::runtime_error(problem);
  const std::uint64_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) throw std::runtime_error("cannot open the file");
  if (size == 0) throw std::runtime_error("the file is empty");
  char magic[2] = {0, 0};
  in.read(magic, 2);
  if (in.gcount() < 2 || magic[0] != 'P' || magic[1] != 'K') {
    throw std::runtime_error("it is not in torch.save's zip format (it may be a legacy-format pickle, or not "
                             "a torch.save file at all): save it again with torch.save(obj, path) from PyTorch 1.6 or newer");
  }
  c10::IValue value;
  RecordSizes recordSizes;
  try {
    value = loadZip(path, size, &recordSizes);
  } catch (const std::exception& e) {
    throw std::runtime_error(summarizeTorchError(e));
  }
  if (std::string problem = checkTensorsInside(value, &recordSizes); !problem.empty()) throw std::runtime_error(problem);
  return value;
}

std::vector<char> saveTorchFile(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* bytes, std::size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> file;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    const char* bytes = static_cast<const char*>(data);
    file.insert(file.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return file;
}

} // namespace hookscope
