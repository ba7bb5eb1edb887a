// The RPC agent (rpc_agent_impl.h): direct reads between workers of one
// host (rpc_direct.h): the probe, the offers a sender keeps until read, and
// their release.

#include "rpc/rpc_agent_impl.h"

namespace tdist::rpc::detail {

void AgentImpl::probe_direct_reads() {
  const int world = static_cast<int>(infos_.size());
  std::string readable(static_cast<size_t>(world), '0');
  pids_.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    if (r == rank_) continue;
    const std::string card = to_string(store_->get("direct/card/" + std::to_string(r)));
    pids_[static_cast<size_t>(r)] = detail::card_pid(card);
    if (direct_min_bytes_ > 0 && detail::can_read_directly(card)) readable[static_cast<size_t>(r)] = '1';
  }
  store_->set("direct/readable/" + std::to_string(rank_), readable);
  offer_to_.assign(static_cast<size_t>(world), false);
  if (direct_min_bytes_ == 0) return;
  for (int r = 0; r < world; ++r) {
    if (r == rank_) continue;
    const std::string theirs = to_string(store_->get("direct/readable/" + std::to_string(r)));
    offer_to_[static_cast<size_t>(r)] = theirs.size() == static_cast<size_t>(world) && theirs[rank_] == '1';
  }
}

std::vector<wire::TensorMeta> AgentImpl::describe(int peer, uint64_t id, bool response,
                                                  const std::vector<Tensor>& tensors) {
  std::vector<wire::TensorMeta> metas;
  metas.reserve(tensors.size());
  std::vector<Offer> offers;
  const bool may_offer = !offer_to_.empty() && offer_to_[static_cast<size_t>(peer)];
  for (const Tensor& t : tensors) {
    wire::TensorMeta m{t.dtype(), t.shape(), std::nullopt, std::nullopt};
    if (t.nbytes() <= wire::kInlineMaxBytes) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      m.bytes.emplace(p, p + t.nbytes());
    } else if (may_offer && t.nbytes() >= direct_min_bytes_) {
      if (auto hold = detail::acquire_hold()) {
        m.direct = wire::DirectSource{reinterpret_cast<uint64_t>(t.data()),
                                      reinterpret_cast<uint64_t>(hold->word), hold->token};
        offers.push_back(Offer{t, *hold});
      }
    }
    metas.push_back(std::move(m));
  }
  if (!offers.empty()) {
    std::lock_guard<std::mutex> lock(offers_mutex_);
    offers_[OfferKey{peer, id, response}] = std::move(offers);
  }
  return metas;
}

void AgentImpl::read_direct(int source, const std::vector<wire::TensorMeta>& metas,
                            std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < metas.size(); ++i) {
    if (!metas[i].direct || tensors[i].nbytes() == 0) continue;
    const wire::DirectSource& d = *metas[i].direct;
    detail::read_offer(pids_[static_cast<size_t>(source)], name_of(source), tensors[i].data(),
                       tensors[i].nbytes(), d.address, d.hold_word, d.token);
  }
}

void AgentImpl::release_offers(int source, uint64_t id, bool response,
                               const std::vector<wire::TensorMeta>& metas) {
  if (std::none_of(metas.begin(), metas.end(),
                   [](const wire::TensorMeta& m) { return m.direct.has_value(); }))
    return;
  auto bytes = std::make_shared<std::vector<uint8_t>>(wire::encode(wire::Release{id, response}));
  net_->isend(source, wire::kReleaseTag, bytes->data(), bytes->size())
      ->on_complete([bytes](transport::Request&) {});
}

void AgentImpl::drop_offer(const OfferKey& key) {
  std::vector<Offer> dropped;
  {
    std::lock_guard<std::mutex> lock(offers_mutex_);
    auto it = offers_.find(key);
    if (it == offers_.end()) return;
    dropped = std::move(it->second);
    offers_.erase(it);
  }
  for (const Offer& o : dropped) detail::release_hold(o.hold);  // before the tensors go
}

void AgentImpl::drop_offers(const std::function<bool(const OfferKey&)>& which) {
  std::vector<Offer> dropped;
  {
    std::lock_guard<std::mutex> lock(offers_mutex_);
    for (auto it = offers_.begin(); it != offers_.end();) {
      if (!which(it->first)) {
        ++it;
        continue;
      }
      for (Offer& o : it->second) dropped.push_back(std::move(o));
      it = offers_.erase(it);
    }
  }
  for (const Offer& o : dropped) detail::release_hold(o.hold);  // before the tensors go
}

}  // namespace tdist::rpc::detail
