//! The names a shard's files take: its stem with the shard appended, so that shards writing
//! into one directory (and the coordinator gathering their records) never overwrite each other.

/// `{stem}.shard{index}of{count}`.
pub(super) fn stem(stem: &str, index: u32, count: u32) -> String {
    format!("{stem}.shard{index}of{count}")
}

/// The name of shard `index`'s records file.
pub(super) fn records_file_name(run_id: &str, index: u32, count: u32) -> String {
    format!("{}.records.ndjson", stem(run_id, index, count))
}
