// Where a worker's records go, one part (a key range of a chunk) at a time: a data file
// (FilePartWriter, the file mode) or the destination memcacheds (StreamSink, the stream mode).
// A part is the checkpoint's unit: Finish makes it durable (a published file, or every destination
// acknowledged its writes) and only then is it recorded, so --resume continues after it.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "data_file.h"
#include "env.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

class PartWriter {
 public:
  virtual ~PartWriter() = default;
  virtual Status Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) = 0;
  // Record bytes (data format records: header, key, value, in the file's version; the stream mode's
  // sink takes version 1; possibly pieces of one record);
  // `records` = records begun in these bytes. The iovecs are valid only during the call.
  virtual Status AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) = 0;
  // Makes the part durable, then runs `before_publish` (the checkpoint's keys/PARTS) and records it.
  virtual Status Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                        const std::function<Status(const PublishedFile&)>& before_publish) = 0;
  // Finish, then after_publish(the published file). A writer with a thread of its own
  // (async_part_writer.h) may return before either ran: they then run on its thread, in order.
  virtual Status FinishThen(uint64_t end_key_index, uint64_t misses,
                            std::function<Status(const PublishedFile&)> before_publish,
                            std::function<void(const PublishedFile&)> after_publish) {
    PublishedFile f;
    CW_RETURN_IF_ERROR(Finish(end_key_index, misses, &f, before_publish));
    if (after_publish) after_publish(f);
    return Status::OK();
  }
  // Runs fn once everything handed over so far is durable and published (here: at once). Not at
  // all if the writer failed (the dump is then aborted).
  virtual void WhenDurable(std::function<void()> fn) { fn(); }
  // Drops the open part (error paths; at a worker's end, after what is queued is done).
  virtual void Abandon() = 0;
  // The source's clock against this host's, ms, and the header's clock_flags
  // (DataFileWriter::set_source_clock); files only.
  virtual void SetSourceClock(int64_t /*ms*/, uint16_t /*flags*/) {}
  // Record bytes in the open part (the worker starts a new part at a batch boundary past
  // --data-file-size).
  virtual uint64_t file_bytes() const = 0;
  // After the open part failed with *s: true if the writer recovered (e.g. reconnected a
  // destination) and the part must be done again from its start, as *again says. False: *s stands
  // (it may say more than before).
  virtual bool Recover(Status* /*s*/, ChunkTask* /*again*/) { return false; }
};

// The file mode: a DataFileWriter.
class FilePartWriter : public PartWriter {
 public:
  FilePartWriter(Env* env, std::string dir, std::string node, uint64_t dump_start_ms, uint16_t version)
      : w_(env, std::move(dir), std::move(node), dump_start_ms, version) {}
  Status Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) override {
    return w_.Open(chunk, part, first_key_index);
  }
  Status AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) override {
    return w_.AppendRaw(iov, iovcnt, records);
  }
  Status Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                const std::function<Status(const PublishedFile&)>& before_publish) override {
    return w_.Finish(end_key_index, misses, out, before_publish);
  }
  void Abandon() override { w_.Abandon(); }
  void SetSourceClock(int64_t ms, uint16_t flags) override { w_.set_source_clock(ms, flags); }
  uint64_t file_bytes() const override { return w_.file_bytes(); }

 private:
  DataFileWriter w_;
};

}  // namespace cachewarm
