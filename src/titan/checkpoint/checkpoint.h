#pragma once
// Checkpoints on disk: a directory holding
//   metadata.json          what the checkpoint holds (below); written last
//   <file>.safetensors     shard files: pieces of tensors, one file per writing rank
//
// A piece is a box of a tensor's global index space (offsets and sizes per dim), stored as a
// whole tensor of those sizes under a key of one shard file. One process saving whole tensors
// writes one piece per tensor; N ranks of a sharded model each write the rows they own. A load
// asks for any box of any tensor and is served from the pieces that overlap it, so M ranks load
// what N saved.
//
// metadata.json:
//   {"format": "titan-checkpoint", "version": 1,
//    "tensors": {"model.norm.weight": {"dtype": "F32", "shape": [64],
//                  "shards": [{"file": "shard-00000-of-00001.safetensors", "key": "model.norm.weight",
//                              "offsets": [0], "sizes": [64]}]}, ...},
//    "files": {"shard-00000-of-00001.safetensors": {"bytes": 123456, "crc32c": 305419896}},
//    "state": {...}}
// "state" is the writer's: the trainer keeps its step, RNG, data position, LR schedule and
// config there.
//
// Saving is atomic: everything is written into a staging folder next to the target, fsync'ed,
// then renamed onto it, so a crash at any moment leaves every earlier checkpoint whole and no
// partial one under the target's name. Loading checks everything before copying anything: the
// metadata's structure, file names that would leave the folder, each file's size and CRC-32C,
// each piece's dtype and shape in its file, and the tensors asked for against those present.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

class SafetensorsReader;

// One rank's piece of a global tensor: `data` sits at `offsets` of a tensor of `global_shape`.
struct Piece {
  Tensor data;
  Shape offsets;
  Shape global_shape;
};
// The whole of `t` as one piece.
Piece whole(const Tensor& t);
using Pieces = std::map<std::string, Piece>;

struct ShardLocation {
  std::string file;
  std::string key;
  Shape offsets;
  Shape sizes;
};

struct TensorMeta {
  DType dtype = kF32;
  Shape shape;
  std::vector<ShardLocation> shards;
};

struct FileMeta {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct Metadata {
  std::map<std::string, TensorMeta> tensors;
  std::map<std::string, FileMeta> files;
  nlohmann::json state = nlohmann::json::object();
};

inline constexpr const char* kMetadataFile = "metadata.json";

// Writes one rank's pieces as shard file `file` of `dir` (fsync'ed) and returns its share of
// the metadata, for merge().
Metadata write_shard_file(const fs::path& dir, const std::string& file, const Pieces& pieces);
// Adds one rank's share to `into`; a tensor must have one dtype and global shape in all shares.
void merge(Metadata& into, const Metadata& share);
// Checks `m` as read_metadata does (pieces tile their tensors, names stay inside the folder)
// and writes it, fsync'ed, as dir/metadata.json.
void write_metadata(const fs::path& dir, const Metadata& m);
// Reads and checks dir/metadata.json; errors name the file and what is wrong in it.
Metadata read_metadata(const fs::path& dir);

// The staging folder a save into `dir` writes before renaming it onto `dir`. A process killed
// during a save leaves it behind; the next save into `dir` removes it first.
fs::path staging_dir(const fs::path& dir);
// Whether `p` is named as staging_dir names them.
bool is_staging_dir(const fs::path& p);
// Makes `dir` (replacing what is there) from what `fill` writes into a fresh staging folder:
// fsync'ed, then renamed in one step, so `dir` is whole, old or new, whatever happens. The
// staging folder is removed when `fill` throws.
void write_directory_atomically(const std::filesystem::path& dir,
                                const std::function<void(const std::filesystem::path&)>& fill);

// Saves `pieces` and `state` as checkpoint `dir` in one process: staging folder, one shard file,
// metadata, fsync, rename. An existing `dir` is replaced atomically. On failure `dir` is left as
// it was. With TITAN_CHECKPOINT_TEST_DELAY_MS set (tests only), pauses that many milliseconds
// after creating the staging folder, so that a test can kill the process mid-save or change the
// tensors while a background save is under way. `also_write` adds files of the caller's (a
// tokenizer) to the staging folder, so that they appear with the checkpoint, not after it.
using AlsoWrite = std::function<void(const std::filesystem::path& stage)>;
void save(const fs::path& dir, const Pieces& pieces, const nlohmann::json& state, const AlsoWrite& also_write = {});

// save() by every rank of `group` at once: rank r writes its `pieces` (any boxes of the global
// tensors; together the ranks' pieces must tile each tensor once) as shard-<r>-of-<N>, rank 0
// adds the metadata with `state` and commits the folder atomically. A failure on any rank fails
// the save on all of them, and nothing is left under `dir`. The ranks must see one filesystem.
void save_collective(const fs::path& dir, const Pieces& pieces, const nlohmann::json& state,
                     dist::ProcessGroup& group);

// What load() expects and accepts.
struct LoadOptions {
  // Checkpoint tensors whose names start with `scope` and that were not asked for are an error
  // (an extra tensor means another model); the others are ignored. "" : all must be asked for.
  std::string scope;
  // Cast pieces of another floating dtype (a bf16 export into f32 weights); otherwise a dtype
  // that differs is an error.
  bool allow_cast = false;
};

// A checkpoint directory opened for loading. The metadata is read and checked on construction;
// shard files are mapped and verified (size, CRC-32C, header) when first needed.
class Reader {
 public:
  explicit Reader(fs::path dir);
  ~Reader();

  const fs::path& dir() const { return dir_; }
  const Metadata& metadata() const { return meta_; }

  // Fills every piece of `targets` (its data at its offsets of the named tensor) from the
  // pieces of the checkpoint that overlap it. Everything is checked first — names present and
  // expected, global shapes, dtypes, every file needed — and reported in one error, so a failed
  // load writes nothing into `targets`.
  void load(const Pieces& targets, const LoadOptions& options = {});

 private:
  // The shard file `name`, mapped and verified on first use.
  const SafetensorsReader& file(const std::string& name);
  void read_into(const std::string& name, const Piece& target);

  fs::path dir_;
  Metadata meta_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
};

}  // namespace titan::checkpoint
