#pragma once

#include "store/SeriesKey.h"

#include <QColor>

#include <map>
#include <string>
#include <vector>

class QCPColorGradient;

/// The colours of the gradient-norm plot's layers. A few layers keep colours of their own for
/// the session (a palette of ten, in the order first drawn, whatever is ticked after them); past
/// the palette, whose colours would repeat and name no layer, a layer's colour says where it sits
/// in the model, first to last along one colour scale: a gradient that vanishes with depth, or
/// one layer out of step with its neighbours, shows in the colours. A layer's ranks share its
/// colour.
class LayerColours {
public:
  /// The scale first layer to last: matplotlib's plasma without its pale yellow end, which a
  /// white plot hides.
  static QCPColorGradient placeGradient();
  /// The model's modules in order (the tree's): what "where a layer sits" means.
  void setModuleOrder(std::vector<std::string> order);
  /// The layers drawn now, each once: past the palette, each one's colour by its place in the
  /// module order (modules it does not name after it, in the order given). Whether it is so.
  bool assign(const std::vector<hookscope::SeriesKey>& layers);
  /// A layer's colour; one not assigned by place takes the next of the palette.
  QColor colour(const hookscope::SeriesKey& key);
  /// Another run: the palette is handed out afresh.
  void forgetPalette() { m_paletteIndex.clear(); }

private:
  std::map<std::string, int> m_paletteIndex;      ///< each layer's entry, in the order first drawn
  std::map<std::string, QColor> m_placeColours;   ///< with many layers: by place in the model
  std::map<std::string, std::size_t> m_order;     ///< module -> its place in the model
};
