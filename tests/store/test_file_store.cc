// FileStore specifics: the file's life cycle and what the spec says about it.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

TEST(FileStore, SpecExampleTwoStoresOnOneFile) {
  std::string path = temp_path("spec");
  FileStore store1(path, 2);
  FileStore store2(path, 2);
  store1.set("first_key", "first_value");
  EXPECT_EQ(to_string(store2.get("first_key")), "first_value");
}

TEST(FileStore, TheLastOfWorldSizeUsersRemovesTheFile) {
  std::string path = temp_path("cleanup");
  auto a = std::make_unique<FileStore>(path, 3);
  auto b = std::make_unique<FileStore>(path, 3);
  a->set("k", "v");
  a.reset();
  b.reset();
  EXPECT_TRUE(exists(path)) << "removed before the third user came";
  {
    FileStore c(path, 3);
    EXPECT_EQ(to_string(c.get("k")), "v");
  }
  EXPECT_FALSE(exists(path));
}

TEST(FileStore, WithoutWorldSizeTheFileGoesWhenNoUserIsLeft) {
  std::string path = temp_path("unfixed");
  auto a = std::make_unique<FileStore>(path);
  {
    FileStore b(path);
    b.set("k", "v");
  }
  EXPECT_TRUE(exists(path));
  EXPECT_EQ(to_string(a->get("k")), "v");
  a.reset();
  EXPECT_FALSE(exists(path));
}

TEST(FileStore, MoreUsersThanWorldSizeIsAnError) {
  std::string path = temp_path("extra");
  FileStore a(path, 1);
  try {
    FileStore b(path, 1);
    FAIL() << "a second user of a world_size=1 file was accepted";
  } catch (const DistStoreError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("world_size is 1"), std::string::npos) << what;
  }
}

TEST(FileStore, DeleteKeyRaisesAsTheSpecSays) {
  std::string path = temp_path("delete");
  FileStore store(path, 1);
  store.set("k", "v");
  try {
    store.delete_key("k");
    FAIL();
  } catch (const DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(store.check({"k"}));
}

TEST(FileStore, NumKeysHidesBookkeeping) {
  std::string path = temp_path("numkeys");
  FileStore store(path, 1);
  EXPECT_EQ(store.num_keys(), 0);
  store.set("a", "1");
  store.add("b", 2);
  EXPECT_EQ(store.num_keys(), 2);
}

TEST(FileStore, AMissingDirectoryIsAnErrorNamingThePath) {
  std::string path = temp_path("nodir") + "/sub/file";
  try {
    FileStore store(path, 1);
    FAIL();
  } catch (const DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(FileStore, AFileThatIsNotAStoreIsReportedAsCorrupt) {
  std::string path = temp_path("garbage");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "\x07garbage", 8), 8);
  close(fd);
  EXPECT_THROW(FileStore store(path, 1), DistStoreError);
  unlink(path.c_str());
}

TEST(FileStore, InvalidArguments) {
  EXPECT_THROW(FileStore("", 1), DistInvalidArgument);
  EXPECT_THROW(FileStore(temp_path("zero"), 0), DistInvalidArgument);
}

}  // namespace
}  // namespace tdist::testing
