#include "tools/tiny_model/corpus.h"

namespace kvcast {

std::string_view TinyModelCorpus() {
  // Original prose written for this project; varied topics and punctuation so
  // the learned merges cover common English words, numbers and code-ish text.
  static constexpr std::string_view kCorpus = R"corpus(
The lighthouse keeper climbed the spiral stairs every evening at dusk. There
were one hundred and twelve steps, and he had counted them so many times that
his feet knew the number better than his head did. At the top he wiped the
salt from the glass, trimmed the wick, and watched the first ships turn their
bows toward the harbour.

In the village below, the baker was already asleep. She rose at three in the
morning to start the bread: flour, water, salt and a little of yesterday's
dough. By six the shop smelled of warm crust, and a line of fishermen waited
outside with their collars turned up against the wind.

Rivers carry more than water. They move sand and stones, seeds and leaves,
and sometimes whole trees after a storm. Over thousands of years a river can
cut a canyon through solid rock, one grain at a time. Geologists read the
layers of a canyon wall the way other people read the pages of a book.

A good recipe is a small program. It names its inputs, describes each step in
order, and tells you when you are done. "Stir until the sauce coats the back
of a spoon" is a condition; "bake for twenty minutes" is a timer. When a cake
fails, the cook, like the programmer, goes back and checks each step.

The train left the station at 7:45 and crossed the river twenty minutes later.
Most passengers read, slept, or looked out at the fields. A child near the
window counted cows: four, nine, fifteen, then too many to count. Her father
said there were probably three hundred, and she decided he was guessing.

Why do cats sleep so much? Scientists think it saves energy for hunting, even
for a house cat whose dinner arrives in a bowl. A cat may sleep for fifteen
hours a day, waking quickly at the sound of a can opener or a bird outside.

Memory is not a recording. Each time we remember something, we rebuild it
from pieces, and the pieces can change. Two friends who shared the same
afternoon years ago may tell very different stories about it, and both may
be sure they are right.

The market opened early on Saturdays. Farmers brought apples and pears,
potatoes, onions, carrots, cheese, honey and eggs. Prices were written in
chalk on small boards: apples 2 for 1 dollar, honey 6 dollars a jar. By noon
the best tomatoes were gone and the musicians had started to play.

def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))

She opened the old letter carefully. The ink had faded to brown, but the
handwriting was still clear: "Dear Thomas, the weather has been fine and the
garden is full of roses. We think of you often. Write soon." It was dated
June 3, 1921, and it had never been sent.

Mountains make their own weather. Warm air rises up one side, cools, and
drops its rain or snow; the far side stays dry. That is why a green valley
and a desert can lie only a few hours' walk apart, separated by a single
ridge of stone.

Learning a language takes patience. At first every sentence is a puzzle, and
you translate each word in your head. Then, one day, you hear a joke and laugh
before you have understood why it is funny. That is the moment the language
starts to belong to you.

The engineer looked at the bridge drawings again. The numbers were right, but
something about the shape bothered her. She built a small model from paper
and string, loaded it with coins, and watched where it bent. The next morning
she moved two of the supports, and the design was better for it.

Questions, answers, and more questions: that is how science works. A result
is never the end of the story; it is an invitation to test the idea again, in
a new place, with better tools, by someone who hopes to prove it wrong.
)corpus";
  return kCorpus;
}

}  // namespace kvcast
