#include "TorchSaveFile.h"

#include "PickleRewrite.h"
#include "TorchError.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fstream>
#include <iterator>

namespace hookscope {

namespace {

c10::IValue loadZip(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  if (!reader.hasRecord("data.pkl")) throw std::runtime_error("the archive holds no data.pkl");
  at::DataPtr data;
  std::size_t size = 0;
  std::tie(data, size) = reader.getRecord("data.pkl");
  const std::string pickle = rewriteSetItem(std::string(static_cast<const char*>(data.get()), size));
  std::size_t offset = 0;
  auto read = [&](char* buffer, std::size_t length) -> std::size_t {
    const std::size_t n = std::min(length, pickle.size() - offset);
    std::memcpy(buffer, pickle.data() + offset, n);
    offset += n;
    return n;
  };
  auto readRecord = [&](const std::string& name) { return std::get<0>(reader.getRecord("data/" + name)); };
  torch::jit::Unpickler unpickler(read, nullptr, nullptr, readRecord, c10::Device(c10::kCPU));
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

} // namespace

c10::IValue loadTorchSaveFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open the file");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) throw std::runtime_error("the file is empty");
  try {
    if (bytes.size() > 4 && bytes[0] == 'P' && bytes[1] == 'K') return loadZip(path);
    return torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(summarizeTorchError(e));
  }
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
