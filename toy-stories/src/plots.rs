//! Story templates: shared openings and endings, and one list of beats per plot.
//! A beat is a list of alternatives; `""` skips the beat, [`PARA`] starts a paragraph.

/// Starts a new paragraph.
pub const PARA: &str = "¶";

type Beats = &'static [&'static [&'static str]];

pub const OPENING: Beats = &[
    &[
        "Once upon a time, there was a {h_adj} {h_kind} named {H}.",
        "Once upon a time, in a {size} {place}, there lived a {h_adj} {h_kind} named {H}.",
        "There once was a {h_kind} called {H}. {h_He} was very {h_adj}.",
        "{H} was a {h_adj} little {h_kind} who lived near the {place}.",
        "In a little house by the {place}, there lived a {h_kind} named {H}.",
        "Long ago, {in_place}, there was a {h_kind} named {H} who was always {h_adj}.",
        "Once there was a {h_adj} {h_kind}. {h_His} name was {H}.",
    ],
    &["{h_He} loved {like}.", "More than anything, {H} liked {like}.", "", "{h_He} lived with {h_his} {parent} in a {size} house."],
];

pub const ENDING: Beats = &[
    &[PARA, ""],
    &[
        "From that day on, {H} and {F} were the best of friends.",
        "It was the best day ever.",
        "That night, {H} went to bed with a big smile.",
        "{H} hugged {h_his} {parent} and said, \"Thank you.\"",
        "And they all lived happily ever after.",
        "{H} could not wait to play again the next day.",
        "",
        "",
    ],
];

const LOST: Beats = &[
    &[
        "{H} had {a_obj}. {h_He} loved it very much.",
        "{H}'s favorite toy was {a_obj}.",
        "{h_His} {parent} gave {h_him} {a_obj} for {h_his} birthday.",
    ],
    &["{h_He} took it everywhere, even to bed.", "Every day, {h_he} played with it {in_place}.", ""],
    &[PARA],
    &[
        "{time}, {H} could not find the {obj_n}.",
        "{time}, {H} looked for {h_his} {obj_n}, but it was gone!",
        "{time}, the {obj_n} was not in its box.",
    ],
    &["{h_He} felt very sad.", "{H} began to cry.", "\"Oh no!\" said {H}. \"Where is my {obj_n}?\""],
    &[
        "{h_He} looked under the bed. {h_He} looked behind the door. It was not there.",
        "{h_He} looked near {thing1} and under {thing2}, but {h_he} did not find it.",
        "{h_He} searched {in_place} all morning.",
    ],
    &[PARA],
    &["Then {F} the {f_kind} came by.", "Just then, {h_his} friend {F} walked up.", "A {f_adj} {f_kind} named {F} saw {h_him}."],
    &["\"Why are you sad?\" asked {F}.", "\"What is wrong?\" {F} asked.", "\"Can I help you?\" asked {F}."],
    &["\"I lost my {obj_n},\" said {H}.", "{H} told {F} about the {obj_n}."],
    &["\"Let's look together,\" said {F}.", "\"Don't worry. Two friends can find anything,\" said {F}."],
    &[
        "They looked by {thing3}, and there it was!",
        "{F} had a good idea. {f_He} looked in the place where {H} had played last. The {obj_n} was there!",
        "At last, {F} saw something {in_place}. It was the {obj_n}!",
    ],
    &["{H} jumped for joy.", "{H} was so happy that {h_he} laughed and laughed.", "{H} held the {obj_n} tight."],
    &["\"Thank you, {F}!\" {h_he} said.", "{h_He} thanked {F} again and again."],
    &["{H} learned that a good friend makes every problem smaller.", "After that, {H} always put the {obj_n} back in its place.", ""],
];

const SHARE: Beats = &[
    &["{time}, {H} had {food} for a snack.", "{time}, {H}'s {parent} gave {h_him} {food}.", "{H} found {food} on the table {time_l}."],
    &["It looked so yummy.", "{h_He} wanted to eat it all by {h_him}self.", "It smelled very good."],
    &[PARA],
    &["Then {F} came over.", "Just then, {F} the {f_kind} walked by.", "{h_His} friend {F} was sitting {in_place}."],
    &["{F} looked hungry.", "{F} had no snack.", "{F}'s tummy made a loud noise."],
    &["\"Can I have some?\" asked {F}.", "{F} looked at the {food_n} but did not say a word."],
    &["{H} did not want to share at first.", "{H} thought for a moment.", "{H} held the {food_n} close."],
    &[PARA],
    &[
        "Then {h_he} remembered what {h_his} {parent} always said: \"Sharing is caring.\"",
        "{h_He} saw how sad {F} looked, and {h_he} felt sorry.",
        "{H} thought about how it feels to be hungry.",
    ],
    &["{h_He} broke the {food_n} in two and gave half to {F}.", "\"Here, you can have half,\" said {H}."],
    &["{F} smiled a big smile.", "\"Thank you!\" said {F}.", "{F} was very happy."],
    &[
        "They ate together {in_place}.",
        "They sat near {thing1} and ate their snack.",
        "The {food_n} tasted even better when they shared it.",
    ],
    &["{H} learned that sharing makes everyone happy.", "{H} felt warm inside.", ""],
];

const FEAR: Beats = &[
    &[
        "{H} was afraid of the dark.",
        "{H} was scared of loud thunder.",
        "{H} was afraid of the deep water {in_place}.",
        "{H} was scared of the big dog next door.",
    ],
    &["{h_He} did not like to talk about it.", "Every time {h_he} thought about it, {h_his} knees shook.", ""],
    &[PARA],
    &["{time}, {h_his} fear came back.", "{time}, {H} felt the fear again.", "{time}, it happened again."],
    &["{h_He} hid under {h_his} blanket.", "{h_He} ran to {h_his} {parent}.", "{h_He} closed {h_his} eyes tight."],
    &["\"I am scared,\" {h_he} said in a small voice.", "\"Help!\" cried {H}.", "{h_He} wanted to be brave, but {h_he} did not know how."],
    &[PARA],
    &[
        "{h_His} {parent} gave {h_him} a big hug. \"Being brave does not mean you are not scared,\" {parent} said.",
        "{F} the {f_kind} sat next to {h_him}. \"I get scared too,\" said {F}. \"Let's be brave together.\"",
        "{h_His} {parent} held {h_his} hand and sang a soft song.",
    ],
    &["{H} took a deep breath.", "{H} counted to ten.", "{H} felt a little better."],
    &[
        "Slowly, {h_he} opened {h_his} eyes. It was not so bad after all.",
        "Step by step, {h_he} faced {h_his} fear.",
        "{h_He} was still a bit scared, but {h_he} did it anyway.",
    ],
    &["{h_He} felt proud of {h_him}self.", "\"I did it!\" said {H}.", "Everyone cheered for {H}."],
    &["{H} learned that being brave is easier with someone you love.", "Now {H} is not so scared anymore.", ""],
];

const MAKE: Beats = &[
    &[
        "{time}, {H} wanted to build a sandcastle.",
        "{time}, {H} wanted to bake a cake for {h_his} {parent}.",
        "{time}, {H} wanted to make a card for {F}.",
        "{time}, {H} wanted to build a tower of blocks as tall as {h_him}.",
        "{time}, {H} decided to make a little boat out of a box.",
    ],
    &["{h_He} got everything ready.", "{h_He} worked very hard.", "{h_He} started right away."],
    &[PARA],
    &["But it fell down.", "But it did not look right.", "But it went wrong, and {h_he} had to start again.", "But it broke into pieces."],
    &["{H} felt like giving up.", "{H} stamped {h_his} feet.", "\"This is too hard,\" said {H}."],
    &["{F} came to see what was wrong.", "{h_His} {parent} came over.", ""],
    &[
        "\"Try again, slowly this time,\" said {F}.",
        "\"Everyone makes mistakes. Let's try again,\" {parent} said.",
        "\"You can do it,\" said a little voice. It was {F}.",
    ],
    &[PARA],
    &["So {H} tried again.", "{H} took a deep breath and started over.", "This time, {H} was careful and patient."],
    &["{h_He} went step by step.", "{h_He} did not rush.", ""],
    &[
        "At last, it was done! It was beautiful.",
        "At the end, it was the best one {h_he} had ever made.",
        "When it was finished, everyone said, \"Wow!\"",
    ],
    &["{H} learned that when you keep trying, you get better.", "{H} was proud of {h_his} work.", "{H} learned to be patient."],
];

const NEW_FRIEND: Beats = &[
    &["{time}, {H} was playing alone {in_place}.", "{time}, {H} went to the {place} by {h_him}self.", "{H} felt lonely {time_l}."],
    &["{h_He} had nobody to play with.", "{h_He} wished {h_he} had a friend.", ""],
    &[PARA],
    &[
        "Then {h_he} saw a {f_kind} sitting near {thing1}.",
        "Near {thing2}, {h_he} saw a new {f_kind}.",
        "A {f_adj} {f_kind} was standing all alone.",
    ],
    &["The {f_kind} looked shy.", "The {f_kind} looked a little sad.", "The {f_kind} was new {in_place}."],
    &["{H} walked over and said, \"Hi! I am {H}. What is your name?\"", "{H} waved and said, \"Hello!\""],
    &["\"My name is {F},\" said the {f_kind}.", "\"I am {F},\" said the {f_kind} quietly."],
    &["\"Do you want to play with me?\" asked {H}.", "\"Would you like to play a game?\" asked {H}."],
    &[PARA],
    &["{F} smiled and said yes.", "{F} nodded and smiled."],
    &[
        "They played tag all around {thing3}.",
        "They played hide and seek {in_place}.",
        "They took turns on {thing1}.",
        "They built a little house out of sticks.",
    ],
    &["They laughed and laughed.", "They had so much fun.", "The time went by so fast."],
    &["When it was time to go home, {F} said, \"Can we play again tomorrow?\"", "\"You are my new friend,\" said {F}."],
    &["{H} learned that saying hello can make a new friend.", ""],
];

const HELP: Beats = &[
    &[
        "{time}, {H} was walking {in_place} when {h_he} heard a small cry.",
        "{time}, {H} saw something strange near {thing1}.",
        "{time}, {H} heard a sad sound coming from {thing2}.",
    ],
    &[
        "It was a little bird with a hurt wing.",
        "It was a kitten stuck up in a tree.",
        "It was {F} the {f_kind}. {f_He} was stuck and could not get out.",
        "It was a baby duck who had lost its mother.",
    ],
    &["\"Don't worry, I will help you,\" said {H}.", "{H} wanted to help right away.", "{H} knew {h_he} had to do something."],
    &[PARA],
    &["{h_He} thought very hard.", "{h_He} ran to get {h_his} {parent}.", "{h_He} asked {F} to help."],
    &[
        "Together they were careful and gentle, and soon everything was all right.",
        "{h_He} used {h_his} {obj} to help, and it worked!",
        "It was hard, but {h_he} did not give up, and at last it was safe.",
    ],
    &["\"Thank you for helping me,\" said a little voice.", "Everyone was happy and safe again.", ""],
    &[PARA, ""],
    &["{H} felt warm and happy inside.", "{h_His} {parent} was very proud of {h_him}.", "{H} smiled all the way home."],
    &["{H} learned that helping others is a good thing to do.", "Being kind made {H} feel good.", ""],
];

const TRIP: Beats = &[
    &[
        "{time}, {H} and {h_his} {parent} went to the {place}.",
        "{time}, {H} went on an adventure to the {place}.",
        "{time}, {H} and {F} walked to the {place}.",
    ],
    &["{h_He} was so excited.", "{H} packed {food} and {h_his} {obj}.", "The sun was shining and the sky was blue."],
    &[PARA],
    &["First, {h_he} saw {thing1}.", "{In_place}, {h_he} saw {thing1} and {thing2}.", "There were so many things to see."],
    &["\"Look!\" said {H}. \"It is so big!\"", "\"Wow,\" said {H}. \"I have never seen that before!\"", ""],
    &[
        "Then {h_he} ran to {thing3}.",
        "Then {h_he} played near {thing3} for a long time.",
        "Then {h_he} found a little path and followed it.",
    ],
    &[PARA],
    &[
        "Suddenly, it started to rain. {H} and {h_his} {parent} ran under a tree and waited.",
        "Suddenly, {H} dropped {h_his} {obj}. {F} helped {h_him} pick it up.",
        "Suddenly, {H} felt very tired. {h_He} sat down to rest and eat {h_his} snack.",
        "After a while, {H} got a little lost, but {h_he} remembered the way back.",
    ],
    &["Soon it was time to go home.", "When the sun went down, they walked home."],
    &[
        "At home, {h_he} told everyone about {h_his} day.",
        "That night, {H} dreamed about the {place}.",
        "{H} said, \"Can we go again soon?\"",
    ],
];

const GARDEN: Beats = &[
    &[
        "{time}, {H} found a tiny seed.",
        "{time}, {H}'s {parent} gave {h_him} a little seed.",
        "{time}, {H} wanted to grow a flower from a tiny seed.",
    ],
    &["{h_He} dug a small hole and put the seed in.", "{h_He} planted it {in_place}.", "{h_He} put it in a pot by the window."],
    &["{h_He} gave it water every day.", "Every morning, {h_he} gave it a little water.", "{h_He} made sure it had lots of sun."],
    &[PARA],
    &["But nothing happened.", "One day passed, then two, then three. Nothing grew.", "{H} waited and waited."],
    &["\"Why is it not growing?\" asked {H}.", "{H} was sad and wanted to dig it up.", "{H} did not understand."],
    &["\"Be patient,\" said {h_his} {parent}. \"Good things take time.\"", "{F} said, \"Seeds are slow. Keep waiting.\""],
    &[PARA],
    &["Then one morning, {H} saw a little green leaf!", "One day, there was a tiny green sprout."],
    &["It grew bigger and bigger.", "Each day it was a little taller."],
    &[
        "Soon there was a big yellow flower.",
        "Soon there was a tall sunflower, taller than {H}!",
        "Soon there was a red tomato, and {H} ate it for lunch.",
        "Soon there were pretty pink flowers.",
    ],
    &["{H} learned that good things come to those who wait.", "{H} was so proud of {h_his} garden.", ""],
];

const RACE: Beats = &[
    &["{time}, {H} and {F} had a race {in_place}.", "{time}, {F} said, \"Let's race to {thing1}!\"", "{H} and {F} liked to race {time_l}."],
    &["\"Ready, set, go!\" they shouted.", "They counted to three and ran.", "{H} wanted to win very much."],
    &["{H} ran very fast.", "{F} ran fast too.", "They ran past {thing2}."],
    &[PARA],
    &["Then {F} tripped and fell down.", "Then {F} hurt {f_his} foot on a stone.", "Suddenly, {F} slipped and fell in the mud."],
    &["{F} began to cry.", "\"Ouch!\" said {F}.", ""],
    &["{H} could win the race now.", "{H} was almost at the end."],
    &["But {h_he} stopped and ran back to {F}.", "But {H} did not keep running. {h_He} went back to help."],
    &["\"Are you okay?\" asked {H}.", "{H} helped {F} get up.", "{H} held out {h_his} hand."],
    &[PARA],
    &["Together, they walked to the end.", "They finished the race side by side.", "They crossed the line together."],
    &["\"You are a good friend,\" said {F}.", "\"Winning is not the most important thing,\" said {H}."],
    &["{H} learned that friends matter more than winning.", "Everyone said they were both winners.", ""],
];

const BIRTHDAY: Beats = &[
    &["{time}, it was {F}'s birthday.", "{F}'s birthday was coming soon.", "{time}, {H} remembered that it was {F}'s birthday."],
    &["{H} wanted to give {f_him} a surprise.", "{H} wanted to make it a special day.", "{H} did not have any money for a present."],
    &[PARA],
    &["{h_He} made a card with a big heart on it.", "{h_He} picked flowers {in_place}.", "{h_He} and {h_his} {parent} baked a cake."],
    &["{h_He} also wrapped up {h_his} {obj} with a ribbon.", "{h_He} asked all their friends to come.", ""],
    &["They hid behind {thing1} and waited.", "Everyone was very quiet.", ""],
    &[PARA],
    &["When {F} came, everyone jumped out and shouted, \"Surprise!\"", "When {F} walked in, they all sang a happy song."],
    &["{F} was so surprised that {f_he} laughed and clapped.", "{F} had tears of joy in {f_his} eyes.", "{F} gave {H} a big hug."],
    &["They ate cake and played games until the sun went down.", "They danced and sang and played all afternoon."],
    &["\"This is the best birthday ever,\" said {F}.", "{H} learned that the best presents come from the heart.", ""],
];

const LISTEN: Beats = &[
    &[
        "{H}'s {parent} said, \"Do not go near {thing2} alone.\"",
        "\"Stay close to me,\" said {H}'s {parent}.",
        "{H}'s {parent} told {h_him}, \"Do not climb {thing1}. It is not safe.\"",
    ],
    &["But {H} did not listen.", "{H} nodded, but {h_he} was very curious."],
    &[PARA],
    &[
        "{time}, {h_he} went there anyway.",
        "When nobody was looking, {h_he} went off alone.",
        "{time}, {h_he} forgot what {h_his} {parent} said.",
    ],
    &[
        "{h_He} slipped and got all wet and muddy.",
        "{h_He} got stuck and could not get down.",
        "{h_He} got lost and could not find the way back.",
        "{h_He} fell and hurt {h_his} knee.",
    ],
    &["{h_He} was scared and cried for help.", "\"Help! Help!\" cried {H}."],
    &[PARA],
    &["{h_His} {parent} heard {h_him} and came fast.", "{F} heard {h_him} and ran to get help."],
    &["Soon {H} was safe again.", "{h_His} {parent} picked {h_him} up and held {h_him} close."],
    &["\"I am sorry,\" said {H}. \"I should have listened.\"", "{H} said sorry."],
    &["{H} learned to listen to {h_his} {parent}.", "After that day, {H} always listened.", "{H} learned that rules keep us safe."],
];

const RAINY: Beats = &[
    &["{time}, it was raining outside.", "{time}, the rain came down all day.", "It was too cold to go out {time_l}."],
    &["{H} could not go to the {place}.", "{H} looked out the window and sighed.", "\"I am so bored,\" said {H}."],
    &[PARA],
    &["Then {h_he} had an idea.", "Then {h_his} {parent} had an idea.", "Then {F} came over with a smile."],
    &[
        "They made a fort with blankets and pillows.",
        "They played a game with {h_his} {obj}.",
        "They drew pictures of the {place} with crayons.",
        "They put on a little show with funny hats.",
    ],
    &["It was so much fun that they forgot about the rain.", "They laughed so hard.", ""],
    &["Later, they had {food} and warm milk.", "Later, {h_his} {parent} read them a story.", ""],
    &[PARA, ""],
    &["When the rain stopped, there was a big rainbow in the sky.", "Soon the sun came out again.", ""],
    &["{H} learned that a rainy day can be fun too.", "{H} said, \"I like rainy days now!\"", ""],
];

const TIDY: Beats = &[
    &["{H}'s room was very messy.", "There were toys all over {H}'s room."],
    &["\"Please clean your room,\" said {h_his} {parent}.", "{h_His} {parent} asked {h_him} to tidy up."],
    &["But {H} did not want to.", "\"Later,\" said {H}. \"I want to play.\""],
    &[PARA],
    &["{time}, {H} wanted to play with {h_his} {obj}.", "{time}, {H} looked for {h_his} {obj}."],
    &["But {h_he} could not find it anywhere.", "It was lost in the mess."],
    &["{h_He} looked and looked, but there were too many things.", "{h_He} felt sad and cross."],
    &[PARA],
    &["So {H} began to clean.", "So {h_he} picked up one toy at a time."],
    &[
        "{h_He} put the books on the shelf and the toys in the box.",
        "{F} came and helped {h_him}.",
        "{h_He} sang a song while {h_he} worked.",
    ],
    &["Under the last pile, {h_he} found the {obj_n}!", "At the very end, there was the {obj_n}!"],
    &["{h_His} room looked so nice and clean.", "{h_His} {parent} smiled and said, \"Well done!\""],
    &["{H} learned that a tidy room is a happy room.", "{H} learned to put things back where they belong.", ""],
];

const TREASURE: Beats = &[
    &["{time}, {H} and {h_his} friend {F} found an old map {in_place}.", "{time}, {F} the {f_kind} showed {H} a map with a big X on it."],
    &["\"It is a treasure map!\" said {H}.", "\"Let's find the treasure!\" said {F}."],
    &[PARA],
    &["They walked past {thing1}.", "They followed the map past {thing2}.", "First, they went to {thing3}."],
    &["Then they counted ten steps.", "Then they looked for the X.", ""],
    &["\"Here it is!\" said {H}.", "At last they found the spot."],
    &["They dug and dug.", "They dug with a little spoon and a stick."],
    &[PARA],
    &[
        "They found an old box. Inside were shiny stones and a note.",
        "They found a small box full of buttons and marbles.",
        "They found a box. Inside was a note that said, \"The real treasure is a friend.\"",
    ],
    &["{H} and {F} laughed.", "They were so happy.", ""],
    &["They shared the treasure and went home.", "They decided to hide a treasure for someone else to find."],
];

/// Every plot the generator draws from.
pub const PLOTS: &[Beats] = &[LOST, SHARE, FEAR, MAKE, NEW_FRIEND, HELP, TRIP, GARDEN, RACE, BIRTHDAY, LISTEN, RAINY, TIDY, TREASURE];
