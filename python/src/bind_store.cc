// The key-value stores (store.h, tcp_store.h, file_store.h) with torch's
// Python signatures. Timeouts are datetime.timedelta; values are bytes (str
// is accepted and encoded as UTF-8). Every call that may wait on the network
// or on a file releases the GIL.

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "tdist/file_store.h"
#include "tdist/tcp_store.h"

namespace tdist::python {
namespace {

using Duration = Store::Duration;

// str or bytes -> Bytes (torch accepts both for values).
Bytes value_bytes(py::handle value, const char* op) {
  if (py::isinstance<py::str>(value)) return tdist::to_bytes(std::string(py::str(value)));
  return to_bytes(value, op);
}

}  // namespace

void bind_store(py::module_& m) {
  py::class_<Store, std::shared_ptr<Store>>(m, "Store",
                                            "Base class of the distributed key-value stores (torch's "
                                            "Store API: set, get, add, compare_set, wait, check, "
                                            "num_keys, delete_key, set_timeout, timeout).")
      .def(
          "set",
          [](Store& s, const std::string& key, py::handle value) {
            Bytes bytes = value_bytes(value, "Store.set");
            py::gil_scoped_release release;
            s.set(key, bytes);
          },
          py::arg("key"), py::arg("value"), "Inserts or overwrites `key` with `value` (bytes or str).")
      .def(
          "get",
          [](Store& s, const std::string& key) {
            Bytes value;
            {
              py::gil_scoped_release release;
              value = s.get(key);
            }
            return from_bytes(value);
          },
          py::arg("key"),
          "The value of `key` as bytes; waits until it exists or the store's timeout passes "
          "(DistStoreTimeoutError).")
      .def(
          "add",
          [](Store& s, const std::string& key, int64_t amount) {
            py::gil_scoped_release release;
            return s.add(key, amount);
          },
          py::arg("key"), py::arg("amount"),
          "Adds `amount` to the integer counter `key` (created if absent); returns the new value.")
      .def(
          "compare_set",
          [](Store& s, const std::string& key, py::handle expected, py::handle desired) {
            Bytes e = value_bytes(expected, "Store.compare_set");
            Bytes d = value_bytes(desired, "Store.compare_set");
            Bytes result;
            {
              py::gil_scoped_release release;
              result = s.compare_set(key, e, d);
            }
            return from_bytes(result);
          },
          py::arg("key"), py::arg("expected_value"), py::arg("desired_value"),
          "Sets `key` to `desired_value` if it holds `expected_value` (or is absent and "
          "`expected_value` is empty); returns the value afterwards.")
      .def(
          "check",
          [](Store& s, const std::vector<std::string>& keys) {
            py::gil_scoped_release release;
            return s.check(keys);
          },
          py::arg("keys"), "True if every key exists, without waiting.")
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, std::optional<Duration> timeout) {
            py::gil_scoped_release release;
            if (timeout) {
              s.wait(keys, *timeout);
            } else {
              s.wait(keys);
            }
          },
          py::arg("keys"), py::arg("timeout") = py::none(),
          "Waits until every key exists, up to `timeout` (default: the store's timeout); raises "
          "DistStoreTimeoutError naming the missing keys.")
      .def(
          "num_keys",
          [](Store& s) {
            py::gil_scoped_release release;
            return s.num_keys();
          },
          "The number of keys in the store.")
      .def(
          "delete_key",
          [](Store& s, const std::string& key) {
            py::gil_scoped_release release;
            return s.delete_key(key);
          },
          py::arg("key"), "Deletes `key`; True if it existed (FileStore raises DistStoreError).")
      .def("set_timeout", &Store::set_timeout, py::arg("timeout"),
           "Sets the default timeout of get() and wait().")
      .def_property_readonly("timeout", &Store::timeout, "The default timeout of get() and wait().");

  py::class_<HashStore, Store, std::shared_ptr<HashStore>>(
      m, "HashStore", "An in-process store backed by a hash map (shared by threads, not processes).")
      .def(py::init<>());

  py::class_<FileStore, Store, std::shared_ptr<FileStore>>(
      m, "FileStore",
      "A store kept in a file shared by the processes of a job; the last of `world_size` users to "
      "close it removes the file.")
      .def(py::init([](const std::string& file_name, int world_size) {
             py::gil_scoped_release release;
             return std::make_shared<FileStore>(file_name, world_size);
           }),
           py::arg("file_name"), py::arg("world_size") = -1)
      .def_property_readonly("path", &FileStore::path, "The file backing the store.");

  py::class_<PrefixStore, Store, std::shared_ptr<PrefixStore>>(
      m, "PrefixStore", "Adds \"<prefix>/\" to every key before passing it to `store`.")
      .def(py::init<std::string, std::shared_ptr<Store>>(), py::arg("prefix"), py::arg("store"))
      .def_property_readonly("underlying_store", &PrefixStore::underlying_store, "The wrapped store.")
      .def_property_readonly("prefix", &PrefixStore::prefix, "The key prefix (without the '/').");

  py::class_<TCPStore, Store, std::shared_ptr<TCPStore>>(
      m, "TCPStore",
      "A store served over TCP: the master (is_master=True) runs the server, every process connects "
      "as a client. port=0 on the master picks a free port (see .port).")
      .def(py::init([](const std::string& host_name, int port, std::optional<int> world_size, bool is_master,
                       Duration timeout, bool wait_for_workers, bool multi_tenant,
                       std::optional<int> master_listen_fd, py::object /*use_libuv*/) {
             TCPStoreOptions options;
             if (port < 0 || port > 65535) {
               throw py::value_error("TCPStore: port " + std::to_string(port) + " is not in [0, 65535]");
             }
             options.port = static_cast<uint16_t>(port);
             options.world_size = world_size;
             options.is_master = is_master;
             options.timeout = timeout;
             options.wait_for_workers = wait_for_workers;
             options.multi_tenant = multi_tenant;
             options.master_listen_fd = master_listen_fd.value_or(-1);
             py::gil_scoped_release release;
             return std::make_shared<TCPStore>(host_name, options);
           }),
           py::arg("host_name"), py::arg("port"), py::arg("world_size") = py::none(),
           py::arg("is_master") = false, py::arg("timeout") = Store::kDefaultTimeout,
           py::arg("wait_for_workers") = true, py::arg("multi_tenant") = false,
           py::arg("master_listen_fd") = py::none(), py::arg("use_libuv") = py::none())
      .def_property_readonly("host", &TCPStore::host, "The host this store connects to.")
      .def_property_readonly("port", &TCPStore::port, "The server's port.")
      .def_property_readonly("world_size", &TCPStore::world_size, "The number of users, if fixed.")
      .def_property_readonly("is_master", &TCPStore::is_master, "True in the process running the server.");
}

}  // namespace tdist::python
