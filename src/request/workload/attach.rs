//! What a request carries beside its words: images and audio from the level's synthetic pool or
//! the images a dataset row names, spliced into the body built for its text, with their facts and
//! the prompt tokens the calibration says they add; and the calibration's probes that learn those
//! tokens, one per image size or audio length.

use bytes::Bytes;

use super::{Workload, dataset_media, media};
use crate::plan::scenario::{Dataset, PromptSource};
use crate::request::openai;
use crate::request::record::ReplayFacts;

impl Workload {
    /// Count the calibrated tokens of each request's media into its prompt target.
    pub fn with_media_tokens(mut self, learned: Option<&[crate::request::record::MediaProbe]>) -> Self {
        self.media_tokens = std::sync::Arc::new(learned.unwrap_or_default().iter().map(|p| p.tokens).collect());
        self
    }

    /// `[workload.media]`: the buckets a calibration probes, `(modality, bucket)`.
    pub fn media_buckets(&self) -> Vec<(&'static str, String)> {
        if let (None, Some(_), PromptSource::Dataset(d)) = (&self.media, &self.dataset_media, &self.source) {
            return dataset_media::sizes(d).into_iter().map(|(w, h)| ("image", format!("{w}x{h}"))).collect();
        }
        self.media.as_ref().map_or_else(Vec::new, |(spec, _)| media::buckets(spec))
    }

    /// A calibration probe: plain probe `k` (`words` filler words) with one item of media bucket
    /// `bucket`; its count less probe `k`'s is what the item adds.
    pub fn media_probe(&self, k: u64, words: usize, bucket: usize) -> Option<Bytes> {
        let part = match &self.media {
            Some((spec, _)) => {
                media::probe_part(spec, self.params.api, self.seed, bucket, self.media_files.as_deref())?
            }
            // A dataset's images: one of the dataset's own of that size.
            None => self.dataset_images()?.probe(bucket)?.clone(),
        };
        let body = openai::probe_body(&self.params, &self.probe_text(k, words));
        openai::media::splice(self.params.api, &body, &[&part]).map(Bytes::from)
    }

    /// `body` with request `index`'s media spliced in, its facts, and the tokens the calibration
    /// says its media add (without media: as it is).
    pub(super) fn with_media(&self, index: u64, body: Vec<u8>) -> (Vec<u8>, Option<Box<ReplayFacts>>, u32) {
        let Some((spec, pool)) = &self.media else { return (body, None, 0) };
        let pool = pool.get_or_init(|| {
            media::MediaPool::build(spec, self.params.api, self.seed, self.salt, self.media_files.as_deref())
        });
        let picked = pool.pick(index);
        let parts: Vec<&Bytes> = picked.parts.iter().collect();
        let body = openai::media::splice(self.params.api, &body, &parts).unwrap_or(body);
        let facts = crate::request::record::MediaFacts { body_bytes: body.len() as u64, ..picked.facts };
        let tokens: u64 = picked.buckets.iter().filter_map(|&b| self.media_tokens.get(b).copied().flatten()).sum();
        let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
        (body, Some(Box::new(ReplayFacts { media: Some(facts), ..ReplayFacts::default() })), tokens)
    }

    /// `body` (dataset prompt of request `index`) with the images its row names in its last
    /// message, their facts and the tokens the calibration says they add; as it is when the
    /// row names none.
    pub(super) fn with_dataset_media(
        &self,
        d: &Dataset,
        index: u64,
        body: Vec<u8>,
    ) -> (Vec<u8>, Option<crate::request::record::MediaFacts>, u32) {
        let Some(cell) = &self.dataset_media else { return (body, None, 0) };
        let media =
            cell.get_or_init(|| dataset_media::DatasetMedia::build(d, self.params.api, self.media_files.as_deref()));
        let pick = self.order[(index % self.order.len() as u64) as usize];
        let Some((parts, buckets, facts)) = media.row(pick) else { return (body, None, 0) };
        let parts: Vec<&Bytes> = parts.iter().collect();
        let tokens: u64 = buckets.iter().filter_map(|&b| self.media_tokens.get(b).copied().flatten()).sum();
        match openai::media::splice_last(self.params.api, &body, &parts) {
            Some(body) => (body, Some(facts), u32::try_from(tokens).unwrap_or(u32::MAX)),
            None => (body, None, 0),
        }
    }

    /// A dataset's images, encoded (now, when not yet).
    fn dataset_images(&self) -> Option<&dataset_media::DatasetMedia> {
        let (cell, PromptSource::Dataset(d)) = (self.dataset_media.as_ref()?, &self.source) else { return None };
        Some(cell.get_or_init(|| dataset_media::DatasetMedia::build(d, self.params.api, self.media_files.as_deref())))
    }
}
