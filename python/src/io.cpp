// kiln._C.io: safetensors files, IDX files and Fashion-MNIST, and the in-memory DataLoader.
#include "common.h"

namespace kiln::python {

void init_io(py::module_& parent) {
  py::module_ m = parent.def_submodule("io", "File formats and data loading.");
  m.def(
      "save_safetensors",
      [](const std::string& path, py::dict tensors, std::map<std::string, std::string> meta) {
        io::NamedTensors named;
        for (auto kv : tensors)
          named.emplace_back(kv.first.cast<std::string>(), kv.second.cast<Tensor>());
        io::save_safetensors(path, named, meta);
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes {name: tensor} to a safetensors file (atomically: a temporary file, then a rename).");
  m.def(
      "load_safetensors",
      [](const std::string& path) {
        py::dict d;
        for (auto& [n, t] : io::load_safetensors(path)) d[py::str(n)] = t;
        return d;
      },
      py::arg("path"), "{name: tensor} from a safetensors file, in the file's order.");
  m.def(
      "read_safetensors_metadata",
      [](const std::string& path) { return io::read_safetensors(path).metadata; }, py::arg("path"));
  m.def("read_idx", &io::read_idx, py::arg("path"), py::arg("raw") = false,
        "An IDX file (MNIST format, .gz or plain): 1-D files as int64, others float32 in [0, 1].");
  m.def(
      "load_fashion_mnist",
      [](const std::string& dir) {
        io::FashionMnist f;
        {
          py::gil_scoped_release g;
          f = io::load_fashion_mnist(dir);
        }
        return py::make_tuple(f.train_images, f.train_labels, f.test_images, f.test_labels);
      },
      py::arg("dir") = "/usr/share/datasets/fashion-mnist",
      "(train_images [60000, 784] float32, train_labels int64, test_images, test_labels).");
  py::class_<io::DataLoader>(
      m, "DataLoader", "Mini-batches of tensors sharing dim 0, reshuffled each epoch from a seed.")
      .def(py::init([](py::object tensors, int64_t batch_size, bool shuffle, bool drop_last,
                       uint64_t seed) {
             std::vector<Tensor> ts;
             if (py::isinstance<Tensor>(tensors))
               ts.push_back(tensors.cast<Tensor>());
             else
               for (py::handle h : tensors) ts.push_back(tensor_from_object(h));
             return std::make_unique<io::DataLoader>(ts, batch_size, shuffle, drop_last, seed);
           }),
           py::arg("tensors"), py::arg("batch_size") = 1, py::arg("shuffle") = false,
           py::arg("drop_last") = false, py::arg("seed") = 0)
      .def("__len__", &io::DataLoader::size)
      .def(
          "_start_epoch", [](io::DataLoader& dl) { dl.begin(); },
          "Starts the next epoch (reshuffling when enabled); kiln.io.DataLoader iterates with it.")
      .def(
          "batch",
          [](const io::DataLoader& dl, int64_t i) {
            if (i < 0 || i >= dl.size())
              raise(index_error_type(), str_cat("[DataLoader] batch ", i, " of ", dl.size()));
            std::vector<Tensor> b = dl.batch(i);
            py::tuple t(b.size());
            for (size_t k = 0; k < b.size(); ++k) t[k] = py::cast(b[k]);
            return t;
          },
          py::arg("i"))
      .def_property_readonly("num_samples", &io::DataLoader::num_samples)
      .def_property_readonly("batch_size", &io::DataLoader::batch_size)
      .def_property_readonly("epoch", &io::DataLoader::epoch)
      .def("set_epoch", &io::DataLoader::set_epoch, py::arg("epoch"));
}

}  // namespace kiln::python
